# One recipe, two images: `app` (gateway, parser, tool workers: no torch) and `engine` (decode workers:
# torch + the native engine). compose.yaml picks the target and the command.
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

FROM deps AS engine-deps
RUN pip install --extra-index-url https://download.pytorch.org/whl/cpu "torch==2.13.0" "safetensors>=0.4"

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
RUN pip install --no-deps -e . && useradd --create-home --uid 10001 turnstream && chown -R turnstream /app
USER turnstream
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 CMD ["turnstream", "healthcheck"]
ENTRYPOINT ["turnstream"]

FROM engine-deps AS engine
COPY --from=sources /app /app
RUN pip install --no-deps -e . && useradd --create-home --uid 10001 turnstream && chown -R turnstream /app
USER turnstream
HEALTHCHECK --interval=10s --timeout=5s --start-period=120s --retries=3 CMD ["turnstream", "healthcheck"]
ENTRYPOINT ["turnstream"]
