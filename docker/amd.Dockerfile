# tprimat on AMD Instinct GPUs, on AMD's ROCm Primus / Megatron-LM training image (ROCm PyTorch, Primus,
# Megatron-LM fork). Override the base with --build-arg BASE=rocm/megatron-lm:<tag> or a rocm/pytorch tag.
#   docker build -f docker/amd.Dockerfile -t tprimat:amd .
#   docker run --device=/dev/kfd --device=/dev/dri --group-add video --ipc=host --rm \
#       -v $PWD/outputs:/opt/tprimat/outputs tprimat:amd \
#       python launch.py platform=amd framework=primus model=llama training.max_steps=30
ARG BASE=rocm/primus:v25.10
FROM ${BASE}

WORKDIR /opt/tprimat
COPY pyproject.toml README.md launch.py ./
COPY conf ./conf
COPY tprimat ./tprimat
COPY hydra_plugins ./hydra_plugins
COPY bench ./bench
# ROCm torch comes from the base image: no CPU constraints file here.
RUN pip install --no-cache-dir -e ".[transformers,fp8]"

ENV PRIMUS_PATH=/workspace/Primus \
    MEGATRON_LM_PATH=/workspace/Megatron-LM \
    WANDB_MODE=offline
CMD ["python", "launch.py", "platform=amd"]
