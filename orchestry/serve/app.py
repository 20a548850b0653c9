"""The HTTP server: OpenAI's chat completions and completions (streamed or not), the model list,
health, metrics.

POST /v1/chat/completions   a reply from the team or one agent (`models.py`), batched
                            (`batcher.py`), with the client's tools (`tool_calls.py`)
POST /v1/completions        plain-text continuation by one agent, a choice per prompt
GET  /v1/models             the served model names
GET  /health                200 while the worker runs: the models and the queue's depth
GET  /metrics               Prometheus text format (`metrics.py`)

A streamed agent request's text goes out as its tokens are generated (`streaming.py`); the team's
comes whole when its program is joined. A request is refused before it joins a batch when anything
about it alone is wrong: its body (`request_body.py`: size, UTF-8, JSON, nesting, lone
surrogates), its fields (`schema.py`), its model, task, prompt length or seed
(`models.Served.job`). Every error, at every layer, comes in
OpenAI's shape (`errors.py`): 400 a bad field (named), 401 no key (`auth.py`), 404 an unknown model
or route, 405 a wrong method, 413 a body over the limit, 429 a full queue (with Retry-After), 500 a
failed generation, 503 the server closing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from orchestry.agents.base import SamplingSpec
from orchestry.envs.code.user_task import NoEntryPoint
from orchestry.serve import responses, schema
from orchestry.serve.auth import require_api_key
from orchestry.serve.batcher import Batcher, BatchSettings, QueueFull, ServerClosing
from orchestry.serve.errors import RequestError, add_error_handlers, error_body
from orchestry.serve.metrics import CONTENT_TYPE, UNSERVED, ServeMetrics
from orchestry.serve.models import TEXT_ROLE, Job, Reply, Served, UnknownModel
from orchestry.serve.request_body import read_json
from orchestry.serve.streaming import Deltas
from orchestry.serve.tool_calls import ToolOffer, chat_messages

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RequestLimits:
    """What one request may ask for."""

    max_tokens: int
    """The most max_tokens a request may ask for (--max-tokens-limit)."""
    max_body_bytes: int = 1 << 20
    """The largest request body (--max-body-bytes); a larger one is a 413, unread."""
    retry_after_s: int = 1
    """What a 429 tells the client to wait (its Retry-After header)."""


def sampling_for(
    req: schema.ChatRequest | schema.CompletionRequest, defaults: SamplingSpec, limit: int
) -> SamplingSpec:
    """The request's sampling: its temperature (0 = greedy), top_p, max_tokens and stop strings
    over the params' defaults; max_tokens above `limit` is a 400 naming it. Unset, max_tokens is
    the params' max_new_tokens for chat, OpenAI's 16 for completions (at most `limit`)."""
    if isinstance(req, schema.CompletionRequest):
        field, asked, default = "max_tokens", req.max_tokens, schema.DEFAULT_COMPLETION_TOKENS
    else:
        field = "max_tokens" if req.max_tokens else "max_completion_tokens"
        asked, default = req.max_tokens or req.max_completion_tokens, defaults.max_new_tokens
    max_tokens = asked or min(default, limit)
    if max_tokens > limit:
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
    shutdown_timeout_s: float = 60.0,
) -> FastAPI:
    """The app over `served`, its batcher started and stopped with the app (waiting at most
    `shutdown_timeout_s` for the batch under way); with `api_key`, every path but /health and
    /metrics needs it (`auth.py`)."""
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
        batcher.close(shutdown_timeout_s)

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

    def count(model: str | None, status: int) -> None:
        metrics.requests.labels(model=label(model), status=str(status)).inc()

    def answered(model: str, start: float, replies: Sequence[Reply]) -> None:
        count(model, 200)
        metrics.latency.labels(model=model).observe(time.perf_counter() - start)
        metrics.prompt_tokens.labels(model=model).inc(sum(r.prompt_tokens for r in replies))
        metrics.completion_tokens.labels(model=model).inc(sum(r.completion_tokens for r in replies))

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(request: Request) -> dict | StreamingResponse:
        start = time.perf_counter()
        model = None
        try:
            req = schema.parse_chat(await read_json(request, limits.max_body_bytes))
            model = req.model
            offer = ToolOffer.of(req)
            sampling = sampling_for(req, defaults, limits.max_tokens)
            messages = chat_messages(req.messages, offer)
            deltas = Deltas() if req.stream else None
            jobs = await accept(req.model, [messages], sampling, req.seed, offer, deltas)
            if deltas is not None:
                events = _until_gone(chat_events(req, jobs[0], deltas, start), jobs)
                return StreamingResponse(events, media_type="text/event-stream")
            (reply,) = await replies_of(jobs)
        except RequestError as err:
            count(model, err.status)
            raise
        answered(req.model, start, [reply])
        extra = {"orchestry": {"actions": reply.actions}} if reply.actions else None
        return responses.chat_completion(
            responses.completion_id(),
            req.model,
            _content(reply),
            reply.finish_reason,
            reply.prompt_tokens,
            reply.completion_tokens,
            extra,
            reply.tool_calls,
        )

    @app.post("/v1/completions", response_model=None)
    async def completions(request: Request) -> dict | StreamingResponse:
        start = time.perf_counter()
        model = None
        try:
            req = schema.parse_completion(await read_json(request, limits.max_body_bytes))
            model = req.model
            sampling = sampling_for(req, defaults, limits.max_tokens)
            prompts = [[{"role": TEXT_ROLE, "content": p}] for p in req.prompt]
            deltas = Deltas() if req.stream else None
            jobs = await accept(req.model, prompts, sampling, req.seed, None, deltas)
            if deltas is not None:
                events = _until_gone(text_events(req, jobs, deltas, start), jobs)
                return StreamingResponse(events, media_type="text/event-stream")
            replies = await replies_of(jobs)
        except RequestError as err:
            count(model, err.status)
            raise
        answered(req.model, start, replies)
        echo = req.prompt if req.echo else [""] * len(replies)
        return responses.text_completion(
            responses.completion_id("cmpl"),
            req.model,
            [(e + r.text, r.finish_reason) for e, r in zip(echo, replies, strict=True)],
            sum(r.prompt_tokens for r in replies),
            sum(r.completion_tokens for r in replies),
        )

    async def accept(
        model: str,
        prompts: list[list[dict[str, str]]],
        sampling: SamplingSpec,
        seed: int | None,
        tools: ToolOffer | None,
        deltas: Deltas | None,
    ) -> list[Job]:
        """The prompts' jobs, checked and queued together (all or none)."""

        def jobs() -> list[Job]:
            return [
                served.job(model, m, sampling, seed, tools, deltas and deltas.emitter(i))
                for i, m in enumerate(prompts)
            ]

        try:  # tokenizes the prompts: off the event loop
            made = await asyncio.to_thread(jobs)
        except UnknownModel as err:
            raise RequestError(
                404, str(err), "not_found_error", "model", "model_not_found"
            ) from None
        except NoEntryPoint as err:
            raise RequestError(400, f"messages: {err}", param="messages") from None
        except ValueError as err:  # the message opens with the field: "seed: ...", "messages: ..."
            raise RequestError(400, str(err), param=str(err).split(":")[0]) from None
        try:
            batcher.submit_all(made)
        except QueueFull as err:
            retry = {"Retry-After": str(limits.retry_after_s)}
            raise RequestError(429, str(err), "rate_limit_error", headers=retry) from None
        except ServerClosing as err:
            raise RequestError(503, str(err), "server_error") from None
        if deltas is not None:
            for i, job in enumerate(made):
                deltas.watch(i, job.future)
        return made

    async def replies_of(jobs: list[Job]) -> list[Reply]:
        try:
            return list(await asyncio.gather(*(asyncio.wrap_future(j.future) for j in jobs)))
        except Exception as err:  # noqa: BLE001  # the generation's own error, passed on
            raise _failure(err) from None

    async def chat_events(
        req: schema.ChatRequest, job: Job, deltas: Deltas, start: float
    ) -> AsyncIterator[str]:
        """OpenAI's chat stream: the role, content deltas as the tokens come, what the stream
        held back, the tool calls, the finish, with include_usage the usage, then [DONE]."""
        cid, created = responses.completion_id(), int(time.time())

        def delta(content: dict[str, Any], finish: str | None = None) -> str:
            return _event(responses.chunk(cid, req.model, created, content, finish))

        yield delta({"role": "assistant", "content": ""})
        async for _, text in deltas.items(1):
            if text:
                yield delta({"content": text})
        try:
            reply = job.future.result()
        except Exception as err:  # noqa: BLE001  # sent as the stream's last event
            failure = _failure(err)
            count(req.model, failure.status)
            yield _event(error_body(failure.message, failure.kind))
            yield _DONE
            return
        answered(req.model, start, [reply])
        rest = _rest(reply.text, job)
        if rest:
            yield delta({"content": rest})
        if reply.tool_calls:
            calls = [{"index": i, **c} for i, c in enumerate(reply.tool_calls)]
            yield delta({"tool_calls": calls})
        yield delta({}, reply.finish_reason)
        if req.include_usage:
            counts = responses.usage(reply.prompt_tokens, reply.completion_tokens)
            yield _event(responses.chunk(cid, req.model, created, None, None, counts))
        yield _DONE

    async def text_events(
        req: schema.CompletionRequest, jobs: list[Job], deltas: Deltas, start: float
    ) -> AsyncIterator[str]:
        """OpenAI's completions stream: each prompt's text as its tokens come (index = the
        prompt's), each choice's finish as it ends, with include_usage the usage, then [DONE]."""
        cid, created = responses.completion_id("cmpl"), int(time.time())

        def piece(i: int, text: str, finish: str | None = None) -> str:
            return _event(responses.text_chunk(cid, req.model, created, text, finish, index=i))

        if req.echo:
            for i, prompt in enumerate(req.prompt):
                yield piece(i, prompt)
        replies: list[Reply] = []
        async for i, text in deltas.items(len(jobs)):
            if text is not None:
                yield piece(i, text)
                continue
            try:
                reply = jobs[i].future.result()
            except Exception as err:  # noqa: BLE001  # sent as the stream's last event
                failure = _failure(err)
                count(req.model, failure.status)
                yield _event(error_body(failure.message, failure.kind))
                yield _DONE
                return
            replies.append(reply)
            yield piece(i, _rest(reply.text, jobs[i]), reply.finish_reason)
        answered(req.model, start, replies)
        if req.include_usage:
            prompt_tokens = sum(r.prompt_tokens for r in replies)
            counts = responses.usage(prompt_tokens, sum(r.completion_tokens for r in replies))
            yield _event(responses.text_chunk(cid, req.model, created, None, None, counts))
        yield _DONE

    return app


_DONE = "data: [DONE]\n\n"


def _event(body: dict[str, Any]) -> str:
    return f"data: {json.dumps(body)}\n\n"


async def _until_gone(events: AsyncIterator[str], jobs: list[Job]) -> AsyncIterator[str]:
    """`events`; when the client goes away first, its jobs still queued are dropped."""
    try:
        async for event in events:
            yield event
    finally:
        for job in jobs:
            job.future.cancel()  # no-op once the worker took it


def _content(reply: Reply) -> str | None:
    """The message's content: null beside tool calls when the agent wrote nothing else."""
    return None if reply.tool_calls and not reply.text.strip() else reply.text


def _rest(text: str, job: Job) -> str:
    """What the stream of `job` has not sent of its reply's `text`."""
    sent = job.stream.sent if job.stream is not None else ""
    if not text.startswith(sent):  # the stream decoded otherwise than the generator: a bug
        log.error("a stream sent %r, not the start of its reply %r", sent[-80:], text[:80])
    return text[len(sent) :]


def _failure(err: BaseException) -> RequestError:
    """An accepted request's failure as the client gets it."""
    if isinstance(err, ServerClosing):
        return RequestError(503, str(err), "server_error")
    return RequestError(500, f"generation failed: {err!r:.300}", "server_error")
