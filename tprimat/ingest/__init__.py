"""Ingestion: logs of runs made elsewhere (Megatron-LM, Primus, NeMo, torchtitan, DeepSpeed, HF Trainer,
TensorBoard, W&B offline) become tprimat results, with the same step fields and the same metrics code."""
