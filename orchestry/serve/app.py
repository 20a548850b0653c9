"""The HTTP server: OpenAI's chat completions (streamed or not), the model list, health, metrics.

POST /v1/chat/completions   a reply from the team or one agent (`models.py`), batched (`batcher.py`)
GET  /v1/models             the served model names
GET  /health                200 while the worker runs: the models and the queue's depth
GET  /metrics               Prometheus text format (`metrics.py`)

Errors come in OpenAI's shape (`{"error": {"message", "type", "param"}}`), so the official client
raises them with the message: 400 a bad field (named), 404 an unknown model, 429 a full queue, 500 a
failed generation (its message), 503 the server closing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import replace

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse

from orchestry.agents.base import SamplingSpec
from orchestry.envs.code.user_task import NoEntryPoint
from orchestry.serve import schema
from orchestry.serve.batcher import Batcher, BatchSettings, QueueFull, ServerClosing
from orchestry.serve.metrics import CONTENT_TYPE, ServeMetrics
from orchestry.serve.models import Reply, Served, UnknownModel

log = logging.getLogger(__name__)
_PIECE = re.compile(r"\s*\S+|\s+")  # a streamed content delta: a word with the space before it


class RequestError(Exception):
    """A request the server refuses: its HTTP status, message and the field at fault."""

    def __init__(self, status: int, message: str, kind: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param


def sampling_for(req: schema.ChatRequest, defaults: SamplingSpec, limit: int) -> SamplingSpec:
    """The request's sampling: its temperature (0 = greedy), top_p and max_tokens over the
    params' defaults; max_tokens above `limit` is a 400 naming it."""
    max_tokens = req.max_tokens or req.max_completion_tokens or min(defaults.max_new_tokens, limit)
    if max_tokens > limit:
        field = "max_tokens" if req.max_tokens else "max_completion_tokens"
        raise RequestError(
            400,
            f"{field}: {max_tokens} is over this server's limit {limit}",
            "invalid_request_error",
            field,
        )
    greedy = req.temperature == 0
    return replace(
        defaults,
        temperature=defaults.temperature if greedy or req.temperature is None else req.temperature,
        top_p=defaults.top_p if req.top_p is None else req.top_p,
        max_new_tokens=max_tokens,
        min_new_tokens=0,
        do_sample=not greedy,
    )


def build_app(
    served: Served, settings: BatchSettings, defaults: SamplingSpec, max_tokens_limit: int
) -> FastAPI:
    """The app over `served`, its batcher started and stopped with the app."""
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

    app = FastAPI(title="orchestry", lifespan=lifespan)

    @app.exception_handler(RequestValidationError)
    async def bad_field(_: Request, err: RequestValidationError) -> JSONResponse:
        first = err.errors()[0]
        loc = [str(p) for p in first["loc"] if p != "body"]
        param = ".".join(loc) or None
        message = f"{param}: {first['msg']}" if param else first["msg"]
        metrics.requests.labels(model="?", status="400").inc()
        return JSONResponse(
            schema.error_body(message, "invalid_request_error", param), status_code=400
        )

    @app.exception_handler(RequestError)
    async def refused(_: Request, err: RequestError) -> JSONResponse:
        return JSONResponse(
            schema.error_body(err.message, err.kind, err.param), status_code=err.status
        )

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
    async def chat(req: schema.ChatRequest) -> dict | StreamingResponse:
        start = time.perf_counter()
        try:
            reply = await _answer(req)
        except RequestError as err:
            metrics.requests.labels(model=req.model, status=str(err.status)).inc()
            raise
        metrics.requests.labels(model=req.model, status="200").inc()
        metrics.latency.labels(model=req.model).observe(time.perf_counter() - start)
        metrics.prompt_tokens.labels(model=req.model).inc(reply.prompt_tokens)
        metrics.completion_tokens.labels(model=req.model).inc(reply.completion_tokens)
        cid = schema.completion_id()
        if req.stream:
            return StreamingResponse(_sse(cid, req.model, reply), media_type="text/event-stream")
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
        sampling = sampling_for(req, defaults, max_tokens_limit)
        messages = [m.model_dump() for m in req.messages]
        try:
            job = served.job(req.model, messages, sampling, req.seed)
        except UnknownModel as err:
            raise RequestError(404, str(err), "not_found_error", "model") from None
        except NoEntryPoint as err:
            raise RequestError(
                400, f"messages: {err}", "invalid_request_error", "messages"
            ) from None
        except ValueError as err:  # the message opens with the field: "seed: ...", "messages: ..."
            field = str(err).split(":")[0]
            raise RequestError(400, str(err), "invalid_request_error", field) from None
        try:
            batcher.submit(job)
        except QueueFull as err:
            raise RequestError(429, str(err), "rate_limit_error") from None
        except ServerClosing as err:
            raise RequestError(503, str(err), "server_error") from None
        try:
            return await asyncio.wrap_future(job.future)
        except ServerClosing as err:
            raise RequestError(503, str(err), "server_error") from None
        except Exception as err:  # noqa: BLE001  # the generation's own error, passed on
            raise RequestError(500, f"generation failed: {err!r}", "server_error") from None

    return app


def _sse(cid: str, model: str, reply: Reply) -> Iterator[str]:
    """The reply as OpenAI streams it: a role chunk, content deltas, a finish chunk, [DONE].
    (The Generator returns whole completions, so the deltas follow the finished generation.)"""
    created = int(time.time())

    def event(delta: dict[str, str], finish: str | None) -> str:
        return f"data: {json.dumps(schema.chunk(cid, model, created, delta, finish))}\n\n"

    yield event({"role": "assistant", "content": ""}, None)
    for piece in _PIECE.findall(reply.text):
        yield event({"content": piece}, None)
    yield event({}, reply.finish_reason)
    yield "data: [DONE]\n\n"


def run_server(app: FastAPI, host: str, port: int) -> None:
    """Serve `app` until interrupted (Ctrl-C or SIGTERM: the batcher fails what still waits)."""
    import uvicorn  # here: the app is built and tested without a server loop

    uvicorn.run(app, host=host, port=port, log_level="info", access_log=False)
