"""Native PyTorch backend: model.py (the decoder), data.py, optim.py, parallelize.py, train.py, backend.py."""
