"""Pipeline-choice and handoff policies shared by the PDD router and the simulator."""

from sglang_pdd.policy.handoff import (
    HANDOFF_MODES,
    HANDOFF_RETRY_S,
    HandoffPlan,
    HandoffPolicy,
    HandoffPolicyConfig,
)
from sglang_pdd.policy.pipeline import (
    PIPELINE_P_MD,
    PIPELINE_P_RLD,
    PIPELINE_P_RLD_MD,
    PIPELINES,
    LinkEstimate,
    PipelineDecision,
    PipelinePolicy,
    PipelinePolicyConfig,
    RequestFacts,
)

__all__ = [
    "HANDOFF_MODES",
    "HANDOFF_RETRY_S",
    "PIPELINES",
    "PIPELINE_P_MD",
    "PIPELINE_P_RLD",
    "PIPELINE_P_RLD_MD",
    "HandoffPlan",
    "HandoffPolicy",
    "HandoffPolicyConfig",
    "LinkEstimate",
    "PipelineDecision",
    "PipelinePolicy",
    "PipelinePolicyConfig",
    "RequestFacts",
]
