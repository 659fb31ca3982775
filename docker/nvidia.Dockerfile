# tprimat on NVIDIA GPUs, on NVIDIA's NeMo Framework container (PyTorch, Megatron-LM / Megatron-Bridge, NeMo,
# Transformer Engine). Override the base with --build-arg BASE=nvcr.io/nvidia/pytorch:<tag>-py3 for a plain
# NGC PyTorch image (native, transformers and deepspeed frameworks only).
#   docker build -f docker/nvidia.Dockerfile -t tprimat:nvidia .
#   docker run --gpus all --ipc=host --rm -v $PWD/outputs:/opt/tprimat/outputs tprimat:nvidia \
#       python launch.py platform=nvidia model=llama training.max_steps=30
ARG BASE=nvcr.io/nvidia/nemo:25.07
FROM ${BASE}

WORKDIR /opt/tprimat
COPY pyproject.toml README.md launch.py ./
COPY conf ./conf
COPY tprimat ./tprimat
COPY hydra_plugins ./hydra_plugins
COPY bench ./bench
# torch, transformer-engine and friends come from the base image: no CPU constraints file here.
RUN pip install --no-cache-dir -e ".[nvidia,transformers,fp8]"

# Where the external adapters find their frameworks inside this image (framework.path overrides).
ENV MEGATRON_LM_PATH=/opt/megatron-lm \
    CUDA_DEVICE_MAX_CONNECTIONS=1 \
    WANDB_MODE=offline
CMD ["python", "launch.py", "platform=nvidia"]
