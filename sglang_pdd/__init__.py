"""sglang-pdd: cross-datacenter Prefill / Relay-Decode / Main-Decode serving for SGLang.

``sglang_pdd.patches`` (the hooks put into SGLang, one module per patched target) has no folder
under ``sglang_pdd/``: it is the top-level ``patches/`` folder, which ``setup.py`` installs as
this package's sub-package (``package_dir={"sglang_pdd.patches": "patches"}``; an editable
install maps it the same way). It sits at the top so that the record of every change to SGLang
is one folder to review when upgrading SGLang; import it as ``sglang_pdd.patches``, never as
``patches``.
"""

__version__ = "0.1.0"
