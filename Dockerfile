# One image for every turnstream process; compose.yaml picks the command.
FROM python:3.11-slim
WORKDIR /app
ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1
COPY pyproject.toml README.md ./
COPY schemas ./schemas
COPY runtime ./runtime
COPY workers ./workers
COPY turnstream ./turnstream
COPY gateway ./gateway
COPY bench ./bench
COPY training ./training
COPY models ./models
RUN pip install --extra-index-url https://download.pytorch.org/whl/cpu -e .
ENTRYPOINT ["turnstream"]
