"""The pipeline's bookkeeping: each stage's code fingerprint, the manifests results carry, the
experiment runner, and the documents derived from the code (params reference, reports index)."""
