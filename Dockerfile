# One image for every sessionstream process: the writer library (import sessionstream.producers.writer),
# the projection worker, the compactor and the dashboard. The command picks the role:
#   docker run IMAGE worker --engine kafka | compactor | dashboard --host 0.0.0.0 | topics ensure
# All settings come from SESSIONSTREAM_* environment variables (README, "Configuration").
# Built from a checkout: docker build -t sessionstream:0.1.0 .
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
# librdkafka ships inside the confluent-kafka wheel; the native fold (native/, Rust) is
# compiled into the sessionstream wheel, so the build stage has Rust's cargo and gcc.
RUN apt-get update -q && apt-get install -y -q --no-install-recommends cargo gcc \
 && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md ./
COPY sessionstream ./sessionstream
COPY producers ./producers
COPY streams ./streams
COPY dashboard ./dashboard
COPY integrations ./integrations
COPY cli ./cli
COPY deploy/local ./deploy/local
COPY native ./native
RUN python -m pip install --no-cache-dir --upgrade pip \
 && python -m pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim-bookworm
# A fixed non-root uid, so Kubernetes' runAsNonRoot can verify it without a name lookup.
RUN useradd --uid 10001 --create-home --shell /usr/sbin/nologin sessionstream
COPY --from=build /wheels /wheels
RUN python -m pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 10001
WORKDIR /home/sessionstream
ENV PYTHONUNBUFFERED=1 \
    SESSIONSTREAM_STATE_DIR=/home/sessionstream/state \
    SESSIONSTREAM_ATTACHMENT_DIR=/home/sessionstream/attachments
# 8765: dashboard; 9464: /metrics, /healthz, /readyz of the worker and the compactor.
EXPOSE 8765 9464
ENTRYPOINT ["sessionstream"]
CMD ["--help"]
