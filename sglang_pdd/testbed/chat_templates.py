"""Chat templates in the style of model families' own, for the tiny model (``tiny-model
--chat-template FAMILY``).

No hub access exists in CI, so these are written here: each renders system prompts, the
``tools`` list, assistant turns with ``tool_calls`` (content null or text) and ``tool`` results
with its family's structure and markers, small enough to read. The markers are plain text to
the tiny tokenizer (byte-level BPE spells them): the tool-call parsers match text, not ids, and
the variants keep the tiny model's vocabulary so one checkpoint serves every family.
"""

from __future__ import annotations

# The tiny model's own template: role markers and contents, nothing of tools.
DEFAULT = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

# Qwen2.5's: tools in the system turn inside <tools>, calls as <tool_call> JSON lines, results
# as <tool_response> blocks of one user turn.
QWEN25 = """\
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content }}\
{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}
{{- '\\n\\n# Tools\\n\\nYou are provided with function signatures within \
<tools></tools>:\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' + tool | tojson }}{%- endfor %}
{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and \
arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, \
"arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) \
or (message.role == 'assistant' and not message.tool_calls) %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant' }}
{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
{%- for call in message.tool_calls %}
{{- '\\n<tool_call>\\n{"name": "' + call.function.name + '", "arguments": ' }}\
{{- call.function.arguments | tojson + '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}\
{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

# Llama 3.1's: header markers, the tools (JSON) in the first user turn with the call format,
# a call as {"name", "parameters"} JSON (several joined by "; ", as Llama 3.2's parser reads
# them), results as ipython turns.
LLAMA3 = """\
{{- bos_token }}
{%- if not tools is defined %}{%- set tools = none %}{%- endif %}
{%- if messages[0].role == 'system' %}
{%- set system_message = messages[0].content | trim %}{%- set messages = messages[1:] %}
{%- else %}{%- set system_message = '' %}{%- endif %}
{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}
{%- if tools is not none %}{{- 'Environment: ipython\\n' }}{%- endif %}
{{- 'Cutting Knowledge Date: December 2023\\nToday Date: 26 Jul 2024\\n\\n' }}
{{- system_message + '<|eot_id|>' }}
{%- if tools is not none %}
{%- if messages | length == 0 or messages[0].role != 'user' %}
{{- raise_exception('Cannot put tools in the first user message when there is none!') }}
{%- endif %}
{%- set first_user_message = messages[0].content | trim %}{%- set messages = messages[1:] %}
{{- '<|start_header_id|>user<|end_header_id|>\\n\\n' }}
{{- 'Given the following functions, please respond with a JSON for a function call with its \
proper arguments that best answers the given prompt.\\n\\nRespond in the format {"name": \
function name, "parameters": dictionary of argument name and its value}. Do not use \
variables.\\n\\n' }}
{%- for t in tools %}{{- t | tojson(indent=4) + '\\n\\n' }}{%- endfor %}
{{- first_user_message + '<|eot_id|>' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'tool' or message.role == 'ipython' %}
{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' }}
{%- if message.content is mapping or message.content is iterable %}\
{{- message.content | tojson }}{%- else %}{{- message.content }}{%- endif %}
{{- '<|eot_id|>' }}
{%- elif message.tool_calls %}
{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- for call in message.tool_calls %}
{{- '{"name": "' + call.function.name + '", "parameters": ' }}\
{{- call.function.arguments | tojson + '}' }}{%- if not loop.last %}{{- '; ' }}{%- endif %}
{%- endfor %}
{{- '<|eot_id|>' }}
{%- else %}
{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' }}\
{{- message.content | trim + '<|eot_id|>' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\
{%- endif %}
"""

# Mistral v0.3's: [INST] turns, the tools in [AVAILABLE_TOOLS] before the last user turn, the
# system prompt folded into that turn, calls as a [TOOL_CALLS] JSON list (with their ids),
# results as [TOOL_RESULTS] objects.
MISTRAL = """\
{%- if messages[0].role == 'system' %}
{%- set system_message = messages[0].content %}{%- set loop_messages = messages[1:] %}
{%- else %}{%- set loop_messages = messages %}{%- endif %}
{%- if not tools is defined %}{%- set tools = none %}{%- endif %}
{%- set user_messages = loop_messages | selectattr('role', 'equalto', 'user') | list %}
{{- bos_token }}
{%- for message in loop_messages %}
{%- if message.role == 'user' %}
{%- if tools is not none and message == user_messages[-1] %}
{{- '[AVAILABLE_TOOLS] ' + tools | tojson + '[/AVAILABLE_TOOLS]' }}
{%- endif %}
{%- if message == user_messages[-1] and system_message is defined %}
{{- '[INST] ' + system_message + '\\n\\n' + message.content + '[/INST]' }}
{%- else %}{{- '[INST] ' + message.content + '[/INST]' }}{%- endif %}
{%- elif message.tool_calls %}
{{- '[TOOL_CALLS] [' }}
{%- for call in message.tool_calls %}
{%- set out = call.function | tojson %}
{{- out[:-1] + ', "id": "' + call.id + '"}' }}{%- if not loop.last %}{{- ', ' }}{%- endif %}
{%- endfor %}
{{- ']' + eos_token }}
{%- elif message.role == 'tool' %}
{{- '[TOOL_RESULTS] {"content": ' + message.content | string + ', "call_id": "' }}\
{{- message.tool_call_id + '"}[/TOOL_RESULTS]' }}
{%- elif message.role == 'assistant' %}
{{- ' ' + message.content | trim + eos_token }}
{%- endif %}
{%- endfor %}
"""

# DeepSeek-V3's: fullwidth-bar markers, the tools in the system prompt (as SGLang's example
# template for V3 puts them), calls as function<sep>name plus a ```json block each, results
# as tool outputs (no assistant prompt after them: the template leaves the model to answer).
DEEPSEEKV3 = """\
{%- set ns = namespace(system_prompt='', is_tool=false) %}
{%- for message in messages %}{%- if message.role == 'system' %}\
{%- set ns.system_prompt = ns.system_prompt + message.content %}{%- endif %}{%- endfor %}
{%- if tools %}
{%- set ns.system_prompt = ns.system_prompt + '\\n\\n## Tools\\n\\n### Function\\n\\nYou have \
the following functions available:\\n' %}
{%- for tool in tools %}
{%- set ns.system_prompt = ns.system_prompt + '\\n- `' + tool.function.name + '`:\\n```json\\n' \
+ tool.function | tojson + '\\n```' %}
{%- endfor %}
{%- endif %}
{{- bos_token + ns.system_prompt }}
{%- for message in messages %}
{%- if message.role == 'user' %}
{%- if ns.is_tool %}{{- '<｜tool▁outputs▁end｜>' }}{%- endif %}{%- set ns.is_tool = false %}
{{- '<｜User｜>' + message.content }}
{%- elif message.role == 'assistant' %}
{%- if ns.is_tool %}{{- '<｜tool▁outputs▁end｜>' }}{%- endif %}{%- set ns.is_tool = false %}
{{- '<｜Assistant｜>' + (message.content or '') }}
{%- if message.tool_calls %}
{{- '<｜tool▁calls▁begin｜>' }}
{%- for call in message.tool_calls %}
{%- if not loop.first %}{{- '\\n' }}{%- endif %}
{{- '<｜tool▁call▁begin｜>' + call.type + '<｜tool▁sep｜>' + call.function.name }}\
{{- '\\n```json\\n' + call.function.arguments | tojson + '\\n```<｜tool▁call▁end｜>' }}
{%- endfor %}
{{- '<｜tool▁calls▁end｜>' }}
{%- endif %}
{{- '<｜end▁of▁sentence｜>' }}
{%- elif message.role == 'tool' %}
{%- if not ns.is_tool %}{{- '<｜tool▁outputs▁begin｜>' }}{%- endif %}{%- set ns.is_tool = true %}
{{- '<｜tool▁output▁begin｜>' + message.content + '<｜tool▁output▁end｜>' }}
{%- endif %}
{%- endfor %}
{%- if ns.is_tool %}{{- '<｜tool▁outputs▁end｜>' }}{%- endif %}
{%- if add_generation_prompt and not ns.is_tool %}{{- '<｜Assistant｜>' }}{%- endif %}
"""

# Each family's template and the tool-call parser (SGLang's --tool-call-parser) that reads
# what a model of that family writes.
FAMILIES: dict[str, tuple[str, str]] = {
    "default": (DEFAULT, "qwen25"),
    "qwen25": (QWEN25, "qwen25"),
    "llama3": (LLAMA3, "llama3"),
    "mistral": (MISTRAL, "mistral"),
    "deepseekv3": (DEEPSEEKV3, "deepseekv3"),
}
