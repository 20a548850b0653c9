"""The HTTP server: OpenAI's chat completions (streamed or not), the model list, health, metrics.

POST /v1/chat/completions   a reply from the team or one agent (`models.py`), batched (`batcher.py`)
GET  /v1/models             the served model names
GET  /health                200 while the worker runs: the models and the queue's depth
GET  /metrics               Prometheus text format (`metrics.py`)

A chat request is refused before it joins a batch when anything about it alone is wrong: its body
(`request_body.py`: size, UTF-8, JSON, nesting, lone surrogates), its fields (`schema.py`), its
model, task, prompt length or seed (`models.Served.job`). Every error, at every layer, comes in
OpenAI's shape (`errors.py`): 400 a bad field (named), 401 no key (`auth.py`), 404 an unknown model
or route, 405 a wrong method, 413 a body over the limit, 429 a full queue (with Retry-After), 500 a
failed generation, 503 the server closing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from orchestry.agents.base import SamplingSpec
from orchestry.envs.code.user_task import NoEntryPoint
from orchestry.serve import schema
from orchestry.serve.auth import require_api_key
from orchestry.serve.batcher import Batcher, BatchSettings, QueueFull, ServerClosing
from orchestry.serve.errors import RequestError, add_error_handlers
from orchestry.serve.metrics import CONTENT_TYPE, UNSERVED, ServeMetrics
from orchestry.serve.models import Reply, Served, UnknownModel
from orchestry.serve.request_body import read_json

log = logging.getLogger(__name__)
_PIECE = re.compile(r"\s*\S+|\s+")  # a streamed content delta: a word with the space before it


@dataclass(frozen=True)
class RequestLimits:
    """What one request may ask for."""

    max_tokens: int
    """The most max_tokens a request may ask for (--max-tokens-limit)."""
    max_body_bytes: int = 1 << 20
    """The largest request body (--max-body-bytes); a larger one is a 413, unread."""
    retry_after_s: int = 1
    """What a 429 tells the client to wait (its Retry-After header)."""


def sampling_for(req: schema.ChatRequest, defaults: SamplingSpec, limit: int) -> SamplingSpec:
    """The request's sampling: its temperature (0 = greedy), top_p, max_tokens and stop strings
    over the params' defaults; max_tokens above `limit` is a 400 naming it."""
    max_tokens = req.max_tokens or req.max_completion_tokens or min(defaults.max_new_tokens, limit)
    if max_tokens > limit:
        field = "max_tokens" if req.max_tokens else "max_completion_tokens"
        raise RequestError(
            400, f"{field}: {max_tokens} is over this server's limit {limit}", param=field
        )
    greedy = req.temperature == 0
    return replace(
        defaults,
        temperature=defaults.temperature if greedy or req.temperature is None else req.temperature,
        top_p=defaults.top_p if req.top_p is None else req.top_p,
        max_new_tokens=max_tokens,
        min_new_tokens=0,
        do_sample=not greedy,
        stop=tuple(req.stop),
    )


def build_app(
    served: Served,
    settings: BatchSettings,
    defaults: SamplingSpec,
    limits: RequestLimits,
    api_key: str | None = None,
) -> FastAPI:
    """The app over `served`, its batcher started and stopped with the app; with `api_key`,
    every path but /health and /metrics needs it (`auth.py`)."""
    metrics = ServeMetrics()
    batcher = Batcher(served, settings, metrics)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        batcher.start()
        log.info(
            "serving %s (max batch %d, queue %d)",
            served.names,
            settings.max_batch,
            settings.max_queue,
        )
        yield
        batcher.close()

    # no /docs, /redoc, /openapi.json: the API is OpenAI's (docs/serving.md)
    app = FastAPI(
        title="orchestry", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    add_error_handlers(app)
    if api_key:
        require_api_key(app, api_key)

    def label(model: str | None) -> str:
        """A metric label: a served name, never a name a client chose."""
        return model if model in served.names else UNSERVED

    @app.get("/health", response_model=None)
    async def health() -> dict | JSONResponse:
        if not batcher.alive:
            body = {"status": "down", "reason": "the batching worker is not running"}
            return JSONResponse(body, status_code=503)
        return {"status": "ok", "models": served.names, "queue": batcher.waiting}

    @app.get("/v1/models")
    async def list_models() -> dict:
        created = int(time.time())
        data = [
            {"id": n, "object": "model", "created": created, "owned_by": "orchestry"}
            for n in served.names
        ]
        return {"object": "list", "data": data}

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.text(), media_type=CONTENT_TYPE)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(request: Request) -> dict | StreamingResponse:
        start = time.perf_counter()
        model = None
        try:
            req = schema.parse_chat(await read_json(request, limits.max_body_bytes))
            model = req.model
            reply = await _answer(req)
        except RequestError as err:
            metrics.requests.labels(model=label(model), status=str(err.status)).inc()
            raise
        metrics.requests.labels(model=req.model, status="200").inc()
        metrics.latency.labels(model=req.model).observe(time.perf_counter() - start)
        metrics.prompt_tokens.labels(model=req.model).inc(reply.prompt_tokens)
        metrics.completion_tokens.labels(model=req.model).inc(reply.completion_tokens)
        cid = schema.completion_id()
        if req.stream:
            usage = req.stream_options is not None and req.stream_options.include_usage
            sse = _sse(cid, req.model, reply, usage)
            return StreamingResponse(sse, media_type="text/event-stream")
        extra = {"orchestry": {"actions": reply.actions}} if reply.actions else None
        return schema.chat_completion(
            cid,
            req.model,
            reply.text,
            reply.finish_reason,
            reply.prompt_tokens,
            reply.completion_tokens,
            extra,
        )

    async def _answer(req: schema.ChatRequest) -> Reply:
        sampling = sampling_for(req, defaults, limits.max_tokens)
        messages = [m.chat() for m in req.messages]
        try:  # tokenizes the prompt: off the event loop
            job = await asyncio.to_thread(served.job, req.model, messages, sampling, req.seed)
        except UnknownModel as err:
            raise RequestError(
                404, str(err), "not_found_error", "model", "model_not_found"
            ) from None
        except NoEntryPoint as err:
            raise RequestError(400, f"messages: {err}", param="messages") from None
        except ValueError as err:  # the message opens with the field: "seed: ...", "messages: ..."
            raise RequestError(400, str(err), param=str(err).split(":")[0]) from None
        try:
            batcher.submit(job)
        except QueueFull as err:
            retry = {"Retry-After": str(limits.retry_after_s)}
            raise RequestError(429, str(err), "rate_limit_error", headers=retry) from None
        except ServerClosing as err:
            raise RequestError(503, str(err), "server_error") from None
        try:
            return await asyncio.wrap_future(job.future)
        except ServerClosing as err:
            raise RequestError(503, str(err), "server_error") from None
        except Exception as err:  # noqa: BLE001  # the generation's own error, passed on
            raise RequestError(500, f"generation failed: {err!r:.300}", "server_error") from None

    return app


def _sse(cid: str, model: str, reply: Reply, usage: bool) -> Iterator[str]:
    """The reply as OpenAI streams it: a role chunk, content deltas, a finish chunk, with
    `usage` a usage chunk, then [DONE]. (The Generator returns whole completions, so the deltas
    follow the finished generation.)"""
    created = int(time.time())

    def event(body: dict) -> str:
        return f"data: {json.dumps(body)}\n\n"

    def delta(content: dict[str, str] | None, finish: str | None) -> str:
        return event(schema.chunk(cid, model, created, content, finish))

    yield delta({"role": "assistant", "content": ""}, None)
    for piece in _PIECE.findall(reply.text):
        yield delta({"content": piece}, None)
    yield delta({}, reply.finish_reason)
    if usage:
        counts = schema.usage(reply.prompt_tokens, reply.completion_tokens)
        yield event(schema.chunk(cid, model, created, None, None, counts))
    yield "data: [DONE]\n\n"


def run_server(app: FastAPI, host: str, port: int) -> None:
    """Serve `app` until interrupted (Ctrl-C or SIGTERM: the batcher fails what still waits)."""
    import uvicorn  # here: the app is built and tested without a server loop

    uvicorn.run(app, host=host, port=port, log_level="info", access_log=False)
