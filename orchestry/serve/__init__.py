"""`python -m orchestry serve`: the trained team and each of its agents behind an OpenAI-compatible
HTTP server (docs/serving.md). app.py: the endpoints; models.py: the model names and how requests
become generate calls; batcher.py: the bounded queue and the worker batching them; schema.py: the
requests; responses.py: the replies as sent; metrics.py: Prometheus metrics; streaming.py:
token-by-token streams; tool_calls.py: the client's tools as OpenAI's tool_calls; team_tools.py
and tool_box.py: the team's own tools, run outside the worker in an isolated box; lora_policy.py:
what the server uses of the LoRA team beyond the Generator contract. Built on a Generator and an
Env (orchestry/bookkeeping/commands.py chooses them from params), it never sees params or the
stages."""
