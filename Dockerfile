# One image for web, worker and beat (docker-compose.yml picks the command).
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
WORKDIR /app
COPY requirements.txt .
# The CPU build of torch first, so sentence-transformers does not pull a CUDA one.
RUN pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
 && pip install --no-cache-dir -r requirements.txt
COPY . .
RUN python -c "import compileall; compileall.compile_dir('.', quiet=1)" \
 && useradd --create-home memory && chown -R memory /app \
 && mkdir -p /srv/anchors && chown memory /srv/anchors
USER memory
EXPOSE 8000
CMD ["gunicorn", "--config", "python:memory_project.gunicorn_config", "memory_project.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", "--threads", "4", "--worker-class", "gthread"]
