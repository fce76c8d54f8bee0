# One specguard image: the operator (`specguard run`), the router (`specguard router`, started
# by the operator) and the simulator (`specguard sim`, a vLLM stand-in for tests and demos).
#
#   docker build -t ghcr.io/specguard/specguard:0.1.0 .
#
# Only wheels are installed (no compiler in either stage) and only the runtime extras: no
# test tools, no plotting libraries (those serve `specguard evaluate` on a workstation).
# The runtime is non-root (65532) and works with a read-only root filesystem: bytecode is
# compiled at build time and nothing writes outside /tmp.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv /opt/specguard \
 && /opt/specguard/bin/pip install --only-binary=:all: "$(ls /wheels/specguard-*.whl)[fast]" \
 && /opt/specguard/bin/pip uninstall -y pip setuptools wheel \
 && find /opt/specguard -name '__pycache__' -prune -exec rm -rf {} + \
 && /opt/specguard/bin/python -m compileall -q -j 0 /opt/specguard/lib

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="specguard" \
      org.opencontainers.image.description="Keeps a vLLM speculative-decoding drafter only while it pays" \
      org.opencontainers.image.source="https://github.com/specguard/specguard" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/specguard /opt/specguard
# The runtime user has a name: a uid missing from /etc/passwd breaks getpass.getuser(),
# which kopf calls for the operator's peering identity (the operator exited at start).
RUN groupadd --gid 65532 specguard \
 && useradd --uid 65532 --gid 65532 --home-dir /tmp --no-create-home \
      --shell /usr/sbin/nologin specguard
ENV PATH=/opt/specguard/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["specguard"]
CMD ["--help"]
