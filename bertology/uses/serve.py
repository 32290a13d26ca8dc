"""`bertology serve`: a model directory as an HTTP JSON API (FastAPI on uvicorn).

Routes: POST /predict (what the fine-tuned task predicts, see predictor.py: a BERT-family,
GPT, XLNet or AWD-LSTM model with a task head, a T5 fine-tuned text to text, a feature head over
static vectors or CoVe; a WiC model labels sentence pairs given each one's target word),
POST /embed (sentence vectors, any encoder), POST /generate (a GPT's continuations of prompts
or a T5's outputs: see generate.py), GET /health and GET /info (both name the model's family
and task), and FastAPI's own /openapi.json and /docs.
Concurrent requests share forward passes through a micro-batcher (batching.py), so throughput
grows with load while a lone request waits at most `max_wait_ms`; generation requests run one
after another on the same model thread, each with its own settings.

Every mistake in a request is a 4xx answer with a one-line JSON {"detail": "..."} naming the
field ("texts[3]: empty text"), and the server keeps going: malformed JSON 400, a bare encoder
asked to predict 400, wrong types, missing fields, limits and WiC target indices that are no
word of their sentence 422, a body over `max_body_bytes` 413 (checked before anything is
parsed), a body not labelled as JSON 415, a full queue 503; a route the model cannot answer (/generate on an encoder, /predict on a GPT)
400. SIGINT or SIGTERM stops accepting connections, lets the requests in
flight finish, and exits with status 0."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Annotated, Literal

import torch
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from .. import __version__
from ..config import MAX_SEED, Device, check_settings, setting
from ..errors import UserError
from ..inference.generation import GenerationConfig
from ..inference.modeldir import open_model_dir
from ..inference.predictor import Predictor
from ..models import resolve_model_dir
from ..ops import PRECISION_HELP, PRECISIONS, run_precision
from ..text import is_invisible, replace_surrogates
from .batching import MicroBatcher, Overloaded
from .generate import TextGenerator

GRACEFUL_SHUTDOWN_S = 30  # requests still running after this long are cancelled


@dataclass
class ServeConfig(Device):
    """Where to listen, how to batch, and what a request may hold.

    The settings of `bertology serve`.
    """

    model: str = setting("", required=True, metavar="MODEL", model_dir=True,
                         help="a model directory (fine-tuned, or a bare encoder), or an installed model's name")
    host: str = setting("127.0.0.1", help="the address to listen on (0.0.0.0: every interface)")
    port: int = setting(8000, minimum=0, help="the port (0: a free one)")
    max_batch: int = setting(64, positive=True, help="texts per forward pass (1: no batching)")
    max_wait_ms: float = setting(5.0, minimum=0, maximum=60_000, help="how long a batch's first text waits for more")
    max_queue: int = setting(1024, positive=True, help="texts waiting for the model; more are refused with 503")
    max_texts: int = setting(64, positive=True, help="texts per request")
    max_text_chars: int = setting(10_000, positive=True, help="characters per text (tokens beyond the model's "
                                                               "limit are cut anyway)")
    max_body_bytes: int = setting(1_000_000, positive=True, help="the largest request body")
    max_new_tokens: int = setting(256, positive=True, help="/generate: the most new tokens a request may ask for")
    max_beams: int = setting(8, positive=True, help="/generate: the most beams a request may ask for")
    # /embed's vectors are compared with vectors made elsewhere: bf16 would make them depend on the processor.
    precision: str = setting("fp32", choices=PRECISIONS,
                             help="fp32: the same answers and vectors on every machine; bf16 is faster, but vectors "
                                  f"differ by about 1e-3; {PRECISION_HELP}")

    def validate(self) -> None:
        """Check the settings before anything is loaded (a model given by name becomes its folder)."""
        check_settings(self)
        if self.max_queue < self.max_texts:
            raise UserError(f"--max-queue ({self.max_queue}) must be at least --max-texts ({self.max_texts}), "
                            "or a full request could never be queued")
        if self.port >= 65536:
            raise UserError(f"--port must be below 65536, got {self.port}")
        self.model = str(resolve_model_dir(self.model))  # a name becomes the installed model's folder


# A JSON string may hold a lone surrogate ("\ud800"), which the tokenizers refuse outright: it
# becomes U+FFFD, as an undecodable byte of a file would (text.py).
Text = Annotated[str, AfterValidator(lambda text: replace_surrogates(text)[0])]
# A list, not a tuple: strict validation takes a tuple only from Python, never from a JSON array.
TargetIndices = Annotated[list[int], Field(min_length=2, max_length=2)]


class PredictRequest(BaseModel):
    """Texts to predict for (and their second texts, for pair tasks and question answering; and
    for WiC, the target word's place in each sentence of a pair)."""

    model_config = ConfigDict(strict=True, extra="forbid")
    texts: list[Text] = Field(description="the texts; for question answering, the questions; for WiC, each pair's "
                                         "first sentence")
    text_pairs: list[Text] | None = Field(None, description="pair tasks: the second text of each text; "
                                         "question answering: the context of each question; WiC: each pair's "
                                         "second sentence")
    target_indices: list[TargetIndices] | None = Field(
        None, description="WiC only, and required there: per text, [i1, i2], the target word's index (from 0) among "
                          "the whitespace-separated words of texts[i] and of text_pairs[i], as WiC's data files "
                          'give it ("i1-i2")')


class EmbedRequest(BaseModel):
    """Texts to embed, and how."""

    model_config = ConfigDict(strict=True, extra="forbid")
    texts: list[Text]
    pooling: Literal["mean", "cls", "max"] = Field("mean", description="how token vectors become one vector")
    normalize: bool = Field(True, description="scale to unit length (a dot product is then the cosine similarity)")


class GenerateRequest(BaseModel):
    """Prompts to continue, and how (the settings of `bertology generate`, transformers' names)."""

    model_config = ConfigDict(strict=True, extra="forbid")
    prompts: list[Text] = Field(description="the texts to continue")
    max_new_tokens: int | None = Field(None, description="the most tokens added to each prompt (default: 50, or "
                                                         "the server's limit if that is lower)")
    do_sample: bool = Field(False, description="sample each token instead of taking the most probable one")
    temperature: float = Field(1.0, description="sampling: divide the logits by this")
    top_k: int | None = Field(None, description="sampling: only the k most probable tokens")
    top_p: float | None = Field(None, description="sampling: the most probable tokens up to this probability mass")
    num_beams: int = Field(1, description="beam search over this many continuations (1: none)")
    stop: list[Text] = Field([], description="end a continuation before the first of these strings")
    seed: int = Field(0, ge=0, le=MAX_SEED,
                      description="the random seed of sampling (the same request gives the same answer)")


class GenerateResponse(BaseModel):
    """One continuation per prompt, in order (the prompt itself left out)."""

    continuations: list[str]


class ClassPrediction(BaseModel):
    """Classification: the label and every label's probability. WiC: "T" (the target word has the
    same sense in both sentences) or "F", and the probability of each."""

    model_config = ConfigDict(extra="forbid")
    label: str
    scores: dict[str, float]


class ScorePrediction(BaseModel):
    """Regression: the predicted score."""

    model_config = ConfigDict(extra="forbid")
    score: float


class TagPrediction(BaseModel):
    """Tagging: the text's whitespace-separated words and one tag each."""

    model_config = ConfigDict(extra="forbid")
    tokens: list[str]
    tags: list[str]


class SpanPrediction(BaseModel):
    """Question answering: the answer, its character offsets in the context (end exclusive) and
    probability; "" with nulls when the model finds no answer (SQuAD 2.0 models)."""

    model_config = ConfigDict(extra="forbid")
    answer: str
    start: int | None
    end: int | None
    score: float | None


# A T5 fine-tuned text to text writes its answer: it has no probabilities, and says what it wrote instead.
Output = Annotated[str, Field(description="a T5's decoded greedy output, which the answer is read from")]
Valid = Annotated[bool, Field(description='whether the output reads as an answer of the task; false is T5\'s '
                                          '"invalid" prediction, and the answer is then what `bertology predict` '
                                          'writes in its place (the first label, the middle of the score range, no '
                                          'answer, or the tags of the entities it could place)')]


class TextClassPrediction(BaseModel):
    """Classification by a T5 (text to text): the label its output reads as."""

    model_config = ConfigDict(extra="forbid")
    label: str
    output: Output
    valid: Valid


class TextScorePrediction(BaseModel):
    """Regression by a T5 (text to text): the score its output reads as."""

    model_config = ConfigDict(extra="forbid")
    score: float
    output: Output
    valid: Valid


class TextTagPrediction(BaseModel):
    """Tagging by a T5 (text to text): the words and the tags its entity list places on them."""

    model_config = ConfigDict(extra="forbid")
    tokens: list[str]
    tags: list[str]
    output: Output
    valid: Valid


class TextSpanPrediction(BaseModel):
    """Question answering by a T5 (text to text): the answer it wrote ("" for no answer) and the
    character offsets of its first occurrence in the context (end exclusive), null when the
    context does not hold it as written (an uncased vocabulary writes it lower-cased)."""

    model_config = ConfigDict(extra="forbid")
    answer: str
    start: int | None
    end: int | None
    output: Output
    valid: Valid


class PredictResponse(BaseModel):
    """One prediction per text, in order."""

    predictions: list[ClassPrediction | ScorePrediction | TagPrediction | SpanPrediction | TextClassPrediction
                      | TextScorePrediction | TextTagPrediction | TextSpanPrediction]


class EmbedResponse(BaseModel):
    """One vector per text, in order."""

    embeddings: list[list[float]]


def check_texts(texts: list[str], name: str, config: ServeConfig) -> None:
    """422 for an empty list, too many texts, or an empty or too long text (the message names it)."""
    if not texts:
        raise HTTPException(422, f"{name}: empty list; send at least one text")
    if len(texts) > config.max_texts:
        raise HTTPException(422, f"{name}: {len(texts)} texts; at most {config.max_texts} per request")
    for i, text in enumerate(texts):
        if is_invisible(text):
            raise HTTPException(422, f"{name}[{i}]: empty text (nothing visible in it)")
        if len(text) > config.max_text_chars:
            raise HTTPException(422, f"{name}[{i}]: {len(text):,} characters; at most {config.max_text_chars:,}")


def check_pairs(request: PredictRequest, predictor: Predictor, config: ServeConfig) -> None:
    """422 unless text_pairs is given exactly when the task takes pairs, one per text."""
    task = predictor.spec.name
    if request.text_pairs is None:
        if predictor.takes_pairs:
            second = "a context per question" if predictor.kind == "question-answering" else "a second text per text"
            raise HTTPException(422, f"text_pairs: missing; this model's task ({task}) takes {second}")
        return
    if not predictor.takes_pairs:
        raise HTTPException(422, f"text_pairs: this model's task ({task}) takes single texts, not pairs")
    check_texts(request.text_pairs, "text_pairs", config)
    if len(request.text_pairs) != len(request.texts):
        raise HTTPException(422, f"text_pairs: {len(request.texts)} texts but {len(request.text_pairs)} "
                                 "text_pairs; give one per text")


def check_targets(request: PredictRequest, predictor: Predictor) -> None:
    """422 unless target_indices is given exactly when the task reads a target word in each pair (WiC);
    whether they fit the pairs is `Predictor.check_word_pairs`'s to say."""
    task = predictor.spec.name
    if request.target_indices is None:
        if predictor.takes_targets:
            raise HTTPException(422, f"target_indices: missing; this model's task ({task}) takes the target word's "
                                     "index in each text and its text pair, [[i1, i2], ...]")
        return
    if not predictor.takes_targets:
        raise HTTPException(422, f"target_indices: this model's task ({task}) takes no target words")


def field_name(loc: tuple) -> str:
    """Pydantic's error location ("body", "texts", 3) -> "texts[3]"."""
    name = ""
    for part in loc[1:] if loc and loc[0] == "body" else loc:
        name += f"[{part}]" if isinstance(part, int) else f".{part}" if name else str(part)
    return name or "body"


def validation_message(error: dict, content_type: str | None) -> tuple[int, str]:
    """(status, one-line message) for the first of FastAPI's request validation errors."""
    loc = tuple(error["loc"])
    if error["type"] == "json_invalid":
        where = f" at character {loc[1]}" if len(loc) > 1 else ""
        return 400, f"body: malformed JSON ({error.get('ctx', {}).get('error', 'cannot decode')}{where})"
    if loc == ("body",) and error["type"] == "missing":
        return 422, 'body: missing; send a JSON object such as {"texts": ["..."]}'
    if loc == ("body",):
        if "json" not in (content_type or ""):  # FastAPI reads a body as JSON only when it is labelled so
            return 415, f"body: send JSON with Content-Type: application/json (got {content_type or 'none'})"
        return 422, 'body: expected a JSON object such as {"texts": ["..."]}'
    return 422, f"{field_name(loc)}: {error['msg']}"


class BodyLimit:
    """ASGI middleware: 413 for a request body over `limit` bytes, by its Content-Length or as it
    arrives, before anything parses it. An oversized body is still read (and dropped), up to
    `drain` bytes, so that the client, still sending, receives the answer instead of a reset."""

    def __init__(self, app, limit: int, drain: int):
        self.app, self.limit, self.drain = app, limit, drain

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        too_large = not declared.isdigit() or int(declared) > self.limit
        chunks, size, more = [], 0, True
        while more and size <= self.drain:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            too_large = too_large or size > self.limit
            if not too_large:
                chunks.append(chunk)
            more = message.get("more_body", False)
        if too_large:
            detail = f"body: larger than {self.limit:,} bytes (the server's --max-body-bytes)"
            await JSONResponse({"detail": detail}, status_code=413)(scope, receive, send)
            return
        body, replayed = b"".join(chunks), False

        async def replay() -> dict:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def generation_settings(request: GenerateRequest, config: ServeConfig) -> GenerationConfig:
    """The request's generation settings, checked against the server's limits (422 naming the field)."""
    max_new_tokens = min(50, config.max_new_tokens) if request.max_new_tokens is None else request.max_new_tokens
    if max_new_tokens > config.max_new_tokens:
        raise HTTPException(422, f"max_new_tokens: {request.max_new_tokens}; at most {config.max_new_tokens} "
                                 "(the server's --max-new-tokens)")
    if request.num_beams > config.max_beams:
        raise HTTPException(422, f"num_beams: {request.num_beams}; at most {config.max_beams} (the server's --max-beams)")
    settings = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=request.do_sample,
                                temperature=request.temperature, top_k=request.top_k, top_p=request.top_p,
                                num_beams=request.num_beams)
    try:
        settings.validate()
    except UserError as err:
        raise HTTPException(422, str(err)) from None
    return settings


def load_served(model_dir: str, precision: str, device: str = "auto") -> Predictor | TextGenerator:
    """What a model directory serves, on `device` (the `--device` setting): a GPT or T5 generates
    (one fine-tuned for a task predicts); any other model predicts and embeds (a bare encoder only
    embeds, a feature head over word vectors only predicts)."""
    opened = open_model_dir(model_dir)
    if opened.spec.generation is not None and not opened.is_finetuned:
        run_precision(precision, torch.device("cpu"), fixed="fp32",
                      why="generation picks tokens by exact comparisons of logits, which bf16 would make "
                          "machine-dependent")
        return TextGenerator.open(opened, device)
    return Predictor.open(opened, precision, device)


def create_app(served: Predictor | TextGenerator, config: ServeConfig) -> FastAPI:
    """The FastAPI application serving a model (`load_served`) with `config`'s limits and batching.

    The batchers start and stop with the application's lifespan (use TestClient as a
    context manager in tests); on shutdown they answer every queued text first.
    """
    generator = served if isinstance(served, TextGenerator) else None
    predictor = served if isinstance(served, Predictor) else None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        executor = ThreadPoolExecutor(1, thread_name_prefix="bertology-model")  # one forward pass at a time
        settings = {"executor": executor, "max_batch": config.max_batch, "max_wait_ms": config.max_wait_ms,
                    "max_queue": config.max_queue}
        app.state.executor, app.state.generating = executor, 0
        app.state.predict = MicroBatcher(lambda _, items: predict_items(predictor, items, config.max_batch), **settings)
        app.state.embed = MicroBatcher(lambda key, texts: predictor.embed(texts, *key, config.max_batch).tolist(),
                                       **settings)
        for batcher in (app.state.predict, app.state.embed):
            batcher.start()
        yield
        await asyncio.gather(app.state.predict.close(), app.state.embed.close())
        executor.shutdown()

    described = served.describe()
    kind = described["kind"]
    identity = {"family": served.family, "task": described["task"]}  # what /health and /info name
    app = FastAPI(title="bertology", version=__version__, lifespan=lifespan,
                  description=f"Predictions, embeddings or generations from {served.model_dir} ({kind}).")
    app.add_middleware(BodyLimit, limit=config.max_body_bytes, drain=16 * config.max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, err: RequestValidationError) -> JSONResponse:
        status, detail = validation_message(err.errors()[0], request.headers.get("content-type"))
        return JSONResponse({"detail": detail}, status_code=status)

    @app.exception_handler(UserError)
    async def user_error(request: Request, err: UserError) -> JSONResponse:
        return JSONResponse({"detail": str(err)}, status_code=400)

    @app.exception_handler(Overloaded)
    async def overloaded(request: Request, err: Overloaded) -> JSONResponse:
        return JSONResponse({"detail": f"overloaded: {err}"}, status_code=503, headers={"Retry-After": "1"})

    @app.exception_handler(Exception)
    async def internal_error(request: Request, err: Exception) -> JSONResponse:  # logged by uvicorn as well
        return JSONResponse({"detail": f"internal error: {type(err).__name__}: {err}"}, status_code=500)

    @app.post("/predict", response_model=PredictResponse)
    async def predict(request: PredictRequest) -> dict:
        """One prediction per text: a label with every label's probability (WiC: T or F for each pair of
        sentences and target words), a score, tags or an answer span; from a T5 fine-tuned text to text,
        its decoded output and whether it read as an answer instead of probabilities."""
        if generator is not None:
            raise UserError(f"{generator.model_dir} generates text ({generator.model.config.model_type}): it "
                            "serves /generate only")
        if predictor.spec is None:
            raise UserError(f"{predictor.model_dir} is a bare encoder with no task head: it serves /embed only")
        check_texts(request.texts, "texts", config)
        check_pairs(request, predictor, config)
        check_targets(request, predictor)
        if predictor.takes_targets:
            def check_word_pairs() -> None:
                try:
                    predictor.check_word_pairs(request.texts, request.text_pairs, request.target_indices)
                except UserError as err:
                    raise HTTPException(422, str(err)) from None

            # Before batching (an error in a batch fails every request in it), and on the model's thread:
            # the check tokenizes, and one tokenizer must not run on two threads at once.
            await asyncio.get_running_loop().run_in_executor(app.state.executor, check_word_pairs)
        missing = [None] * len(request.texts)
        items = list(zip(request.texts, request.text_pairs or missing, request.target_indices or missing))
        return {"predictions": await app.state.predict.submit(items)}

    @app.post("/embed", response_model=EmbedResponse)
    async def embed(request: EmbedRequest) -> dict:
        """One vector per text: the last layer's token vectors pooled (mean by default) and normalised."""
        if generator is not None:
            raise UserError(f"{generator.model_dir} generates text ({generator.model.config.model_type}): it "
                            "serves /generate only")
        check_texts(request.texts, "texts", config)
        return {"embeddings": await app.state.embed.submit(request.texts, key=(request.pooling, request.normalize))}

    @app.post("/generate", response_model=GenerateResponse)
    async def generate(request: GenerateRequest) -> dict:
        """One continuation per prompt: greedy, sampled (seeded) or beam search, as `bertology generate`."""
        if generator is None:
            raise UserError(f"{predictor.model_dir} ({predictor.kind}) does not generate text: /generate needs a GPT "
                            "or a T5 language model, not fine-tuned for a task (bertology pretrain --arch gpt / t5)")
        check_texts(request.prompts, "prompts", config)
        settings = generation_settings(request, config)
        if app.state.generating + len(request.prompts) > config.max_queue:
            raise Overloaded(f"{app.state.generating} prompts are waiting; at most {config.max_queue}")

        def run() -> list[str]:
            try:
                return generator.generate(request.prompts, settings, request.stop, config.max_batch, request.seed)
            except UserError as err:  # a prompt too long for the context, more beams than tokens
                raise HTTPException(422, f"prompts: {err}" if str(err).startswith("prompt") else str(err)) from None

        app.state.generating += len(request.prompts)
        try:
            continuations = await asyncio.get_running_loop().run_in_executor(app.state.executor, run)
        finally:
            app.state.generating -= len(request.prompts)
        return {"continuations": continuations}

    @app.get("/health")
    async def health() -> dict:
        """{"status": "ok", "family": ..., "task": ...} while the server answers (task null: no task head)."""
        return {"status": "ok", **identity}

    @app.get("/info")
    async def info() -> dict:
        """The model (its family, task and kind), the request limits, and the batching settings with
        what the batchers have done."""
        limits = {k: getattr(config, k) for k in ("max_texts", "max_text_chars", "max_body_bytes")}
        batching = {k: getattr(config, k) for k in ("max_batch", "max_wait_ms", "max_queue")}
        for route in ("predict", "embed"):
            batcher: MicroBatcher = getattr(app.state, route)
            batching[route] = {**asdict(batcher.stats), "queued": batcher.waiting}
        if generator is not None:
            limits.update(max_new_tokens=config.max_new_tokens, max_beams=config.max_beams)
            batching["generate"] = {"queued": app.state.generating}
        return {**described, **identity, "limits": limits, "batching": batching}

    return app


def predict_items(predictor: Predictor, items: list[tuple[str, str | None, list[int] | None]],
                  batch_size: int) -> list[dict]:
    """The predictor over one micro-batch of (text, text pair or None, WiC's [i1, i2] or None) items."""
    texts = [text for text, _, _ in items]
    pairs = [pair for _, pair, _ in items] if predictor.takes_pairs else None
    targets = [indices for _, _, indices in items] if predictor.takes_targets else None
    return predictor.predict(texts, pairs, batch_size, targets)


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port, or a one-line UserError (port in use, unknown host)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as err:
        raise UserError(f"--host {host}: {err.strerror}") from None
    # The protocol must be IPPROTO_TCP, not 0: only then does asyncio set TCP_NODELAY on the
    # accepted connections; without it every answer on a kept-alive connection waits ~40 ms
    # for the client's delayed ACK (Nagle's algorithm).
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # restarts need not wait out TIME_WAIT
    try:
        sock.bind(address)
    except OSError as err:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {err.strerror}") from None
    return sock


@contextlib.contextmanager
def quiet_stop_signals():
    """uvicorn re-raises the SIGINT or SIGTERM that stopped it once it has shut down gracefully;
    for a server that is the normal way to stop, so meanwhile those signals do nothing and the
    command exits with status 0."""
    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in stops}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_server(config: ServeConfig) -> None:
    """Load the model, bind, print the URL, serve until SIGINT or SIGTERM, then drain and return."""
    import uvicorn

    config.validate()
    served = load_served(config.model, config.precision, config.device)
    sock = bind(config.host, config.port)
    host, port = sock.getsockname()[:2]
    server = uvicorn.Server(uvicorn.Config(create_app(served, config), log_level="warning", access_log=False,
                                           timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S))
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    print(f"bertology serve: {served.describe()['kind']} model {config.model} at {url} (docs: {url}/docs)", flush=True)
    with quiet_stop_signals():
        server.run(sockets=[sock])
