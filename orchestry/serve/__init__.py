"""`python -m orchestry serve`: the trained team and each of its agents behind an OpenAI-compatible
HTTP server (docs/serving.md). app.py: the endpoints; models.py: the model names and how requests
become generate calls; batcher.py: the bounded queue and the worker batching them; schema.py: the
wire format; metrics.py: Prometheus metrics. Built on a Generator and an Env (orchestry/bookkeeping/commands.py
chooses them from params), it never sees params or the stages."""
