"""CPU mode: pure-PyTorch stand-ins for ``sgl_kernel`` where the installed wheel cannot load.

PyPI's ``sgl_kernel`` is a CUDA build; on a machine without libcuda importing it fails, yet
SGLang's CPU engine imports a handful of its ops at module import time. ``activation`` decides
whether the stand-in package is needed and puts it on ``sys.path``; ``ops`` holds the
implementations; ``unsupported`` names the ops that have none.
"""
