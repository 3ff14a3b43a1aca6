# kubesoda image: the operator (`kubesoda run`) and the extender (`kubesoda extender`).
# Multi-stage: wheels are built in a full Python image, the runtime is slim, non-root and has no
# build tools. No Docker engine runs on the project's CI machines: `make lint` checks this file
# with hadolint (installed from PyPI by the project's own test extras).
FROM python:3.11.14-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY optimizer ./optimizer
COPY operator ./operator
COPY pe ./pe
RUN pip install --no-cache-dir --upgrade pip==25.3 \
 && pip wheel --no-cache-dir --wheel-dir /wheels '.[web]'

FROM python:3.11.14-slim-bookworm
LABEL org.opencontainers.image.source="https://github.com/kubesoda/kubesoda" \
      org.opencontainers.image.description="SODA scheduler for stream processing on Kubernetes"
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links=/wheels 'kubesoda[web]==0.1.0' \
 && rm -rf /wheels \
 && useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin kubesoda
USER 65532:65532
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
EXPOSE 8888 8080
ENTRYPOINT ["kubesoda"]
CMD ["run"]
