"""Data: the built-in offline datasets, a trial's train/validation data read through
``DataLoader``s, and each rank's share of every epoch (a slice of every global batch for sync,
claimed batches for the asynchronous algorithms). Add a dataset format here.

The built-in sets need only numpy; the loaders and samplers load torch on first use.
"""

from training._lazy import lazy
from training.data._datasets import (
    DATASETS,
    FASHION_MNIST_FILES,
    Dataset,
    check_dataset_loads,
    check_dataset_name,
    fashion_mnist_dirs,
    load_dataset,
    read_idx,
)

__getattr__ = lazy(__name__, {
    "BatchClaims": "_claims",
    "ClaimedBatches": "_loaders",
    "GlobalBatchSlices": "_sampling",
    "InMemory": "_loaders",
    "Shard": "_loaders",
    "TrainData": "_loaders",
    "collate": "_loaders",
    "from_arrays": "_loaders",
    "load_train_data": "_loaders",
    "make_loader": "_loaders",
})

__all__ = [
    "DATASETS", "FASHION_MNIST_FILES", "BatchClaims", "ClaimedBatches", "Dataset",
    "GlobalBatchSlices", "InMemory", "Shard", "TrainData", "check_dataset_loads",
    "check_dataset_name", "collate", "fashion_mnist_dirs", "from_arrays", "load_dataset",
    "load_train_data", "make_loader", "read_idx",
]
