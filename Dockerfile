# One recipe, two images: `app` (gateway, parser, tool workers: no torch) and `engine` (decode workers:
# torch + the native engine; with ENGINE=cuda, vllm on CUDA too). compose.yaml picks the target and the command.
#   docker build --target app -t turnstream:app .
#   docker build --target engine -t turnstream:engine .

# --- dependencies first: these layers change only when pyproject.toml does
FROM python:3.11-slim AS deps
ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /app
COPY pyproject.toml README.md ./
RUN for d in schemas runtime workers gateway turnstream bench training; do mkdir -p $d && touch $d/__init__.py; done \
 && pip install . && pip uninstall -y turnstream \
 && rm -rf schemas runtime workers gateway turnstream bench training build *.egg-info

# ENGINE=cpu (default): CPU torch, the native engine. ENGINE=cuda: vllm and the CUDA torch it pins, from PyPI
# (TURNSTREAM_ENGINE=vllm or native on a GPU; compose profile "gpu"):
#   docker build --target engine --build-arg ENGINE=cuda -t turnstream:engine-cuda .
FROM deps AS engine-deps
ARG ENGINE=cpu
ARG VLLM_VERSION=0.32.0
RUN if [ "$ENGINE" = cuda ]; then pip install "vllm==${VLLM_VERSION}" "safetensors>=0.4" "numpy>=1.26"; \
    else pip install --extra-index-url https://download.pytorch.org/whl/cpu "torch==2.13.0" "safetensors>=0.4" \
      "numpy>=1.26"; fi

# --- the sources, shared by both images
FROM scratch AS sources
COPY pyproject.toml README.md /app/
COPY schemas /app/schemas
COPY runtime /app/runtime
COPY workers /app/workers
COPY gateway /app/gateway
COPY turnstream /app/turnstream
COPY bench /app/bench
COPY training /app/training
COPY models /app/models

FROM deps AS app
COPY --from=sources /app /app
RUN pip install --no-deps -e . && useradd --create-home --uid 10001 turnstream && chown -R turnstream /app \
 && mkdir /hf-cache && chown turnstream /hf-cache  # HF_HOME of the compose "gpu" profile (a volume)
USER turnstream
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 CMD ["turnstream", "healthcheck"]
ENTRYPOINT ["turnstream"]

FROM engine-deps AS engine
COPY --from=sources /app /app
RUN pip install --no-deps -e . && useradd --create-home --uid 10001 turnstream && chown -R turnstream /app \
 && mkdir /hf-cache && chown turnstream /hf-cache  # HF_HOME of the compose "gpu" profile (a volume)
USER turnstream
HEALTHCHECK --interval=10s --timeout=5s --start-period=120s --retries=3 CMD ["turnstream", "healthcheck"]
ENTRYPOINT ["turnstream"]
