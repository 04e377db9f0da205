# sglang-pdd on SGLang's published GPU image: the plugin, nothing else, added.
#   docker build -t sglang-pdd:0.5.23 .
# The base image's SGLang must be the release the plugin pins (scripts/requirements.txt;
# tests/topology/test_dockerfile.py keeps the two equal). It ships SGLang's CUDA build and the
# CUDA Mooncake wheel (mooncake-transfer-engine); the plugin installs without dependencies so
# that none of them is replaced.
ARG SGLANG_IMAGE=lmsysorg/sglang:v0.5.23
FROM ${SGLANG_IMAGE}
COPY setup.py pyproject.toml README.md /opt/sglang-pdd/
COPY sglang_pdd /opt/sglang-pdd/sglang_pdd
COPY patches /opt/sglang-pdd/patches
RUN python3 -m pip install --no-cache-dir --no-deps /opt/sglang-pdd \
 && python3 -c "import mooncake.engine, sglang_pdd.plugin" \
 && sglang-pdd hooks > /dev/null
# Every launch_server in this image loads the plugin through SGLang's plugin entry point;
# `sglang-pdd router`, `launch` and `render` are on the PATH.
