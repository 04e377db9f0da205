"""The handed-off ids written into a parked request, ready for the extend that resumes it."""

from __future__ import annotations

from array import array

from sglang_pdd.request_record import request_record


def set_handoff_tokens(req, token_ids: list[int]) -> int:
    """Make ``token_ids`` the request's output so far and return how many need extending.

    The prompt's KV (and that of ids extended by earlier Catch-Up chunks) stays in the request's
    row as the prefix; the extend covers the rest.
    """
    done = request_record(req).extended_ids  # by earlier Catch-Up chunks
    req.output_ids = array("q", token_ids)
    req.full_untruncated_fill_ids = array("q", req.origin_input_ids) + req.output_ids
    prompt_len = len(req.origin_input_ids)
    req.prefix_len = prompt_len + done
    req.extend_end = prompt_len + len(token_ids)
    if req.return_logprob:
        _align_output_logprobs(req.logprob, token_ids)
    return len(token_ids) - done


def _align_output_logprobs(logprob, token_ids: list[int]) -> None:
    """Give each handed-off id an (empty) entry in the request's output logprob lists, so that
    SGLang's streaming, which slices those lists by output position, sends the entry of each
    token MD samples at that token's position. P's first-token entry stays; the router takes
    the handed-off ids' logprobs from the instance that produced them."""
    count = len(token_ids)
    for name, pad in (
        ("output_token_logprobs_val", None),
        ("output_top_logprobs_val", []),
        ("output_top_logprobs_idx", []),
        ("output_token_ids_logprobs_val", []),
        ("output_token_ids_logprobs_idx", []),
    ):
        values = getattr(logprob, name)  # ReqLogprob fields (sglang_surface); None: not kept
        if values is not None:
            del values[count:]
            values.extend([pad] * (count - len(values)))
    ids = logprob.output_token_logprobs_idx
    if ids is not None:
        del ids[count:]
        ids.extend(token_ids[len(ids) :])
