# The same install and start commands as the README and .ci/run.
FROM python:3.11-slim
WORKDIR /app
COPY . .
RUN python3 -m venv .venv && .venv/bin/pip install -e '.[embedded]'
ENV TASKSERVICE_HOST=0.0.0.0 \
    TASKSERVICE_PORT=8000
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
  CMD .venv/bin/python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=2)"
CMD [".venv/bin/taskservice", "serve"]
