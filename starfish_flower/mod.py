"""`StarfishMod`: the client side of Starfish for a Flower `ClientApp` (a mod, the way
Flower's SecAgg+ is one).

On a TRAIN message of a Starfish round i (config key ``starfish-round``) it

1. checks with both parties that round i is open and that the model the Flower server
   sent hashes to M_{i−1}, the model both parties announce (no training on any other);
2. runs the app's own train function (``call_next``);
3. turns the fitted model into the pseudo-gradient g = (M_{i−1} − M_fit)/η
   (`starfish_flower.arrays`) and uploads it as secret shares to both parties through the
   Starfish SDK (with ‖g‖, δ and the sample count n = the reply's ``num-examples``);
4. replies to the Flower server WITHOUT any model: the app's metrics and a receipt
   (``starfish`` ConfigRecord: client id, round, content hashes of the two shares, bytes
   uploaded, seconds spent in the SDK).

On a TRAIN message naming Starfish tasks (``starfish-tasks``: warm-up or correction of an
unlearning job) it answers each task with the same train function run at the task's
model (fetched from the parties and hash-checked by the SDK), uploads that
pseudo-gradient as shares, and replies with the number answered.

A TRAIN message that is neither is refused: the app would otherwise send its update to
the Flower server in the clear.

On an EVALUATE message naming Starfish tasks (the federated evaluation of a job that
succeeded, docs/JOBS.md §7) it answers each with the app's own evaluate function, run once
at M̂ and once at M_T (both fetched from the parties and hash-checked by the SDK), turns the
two replies into counts (`starfish_flower.eval_reply`: correct = round(accuracy·n), total =
n) and sends them as secret shares to the two parties; the reply to the Flower server
carries the number answered, never the app's metrics. Other EVALUATE messages and other
message types (query) pass through unchanged.

A train reply the app marked with `request_unlearning` makes the mod, after the upload,
file the unlearning of the client's own data at party0 with the client credential (the
operator's parameters) and put the job id in the receipt.

Without `parties` (and `identity`) the mod reads them from the run and node config of each
message (`starfish_flower.app_config`), so the ClientApp can be built at import.

A process that runs many nodes' ClientApps (a simulation actor) opens its TLS channels to
the two parties once per deployment and lets every node's SDK client use them; it
registers each client once, beside that client's first round check. Neither carries a
credential: every call carries its own node's token (client_sdk.channels).
"""

from __future__ import annotations

import copy
import hashlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Error, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp.typing import ClientAppCallable

from client_sdk import Client, StarfishError, TaskInfo
from client_sdk.admin import request_own_unlearning
from client_sdk.channels import PartyChannels
from client_sdk.client import RoundView
from client_sdk.evaluation import EvalCounts, EvalFn
from client_sdk.outbox import federation_id
from proto.wire import model_hash
from starfish_flower import app_config, eval_reply, keys, logs
from starfish_flower.arrays import flatten, pseudo_gradient, unflatten
from starfish_flower.parties import Identity, Parties

log = logs.get(__name__)
MOD_FAILED_PRECONDITION = 6  #: flwr.common.constant.ErrorCode.MOD_FAILED_PRECONDITION
#: (deployment, client id) registered from this process (a simulation actor runs many clients)
_REGISTERED: set[tuple[str, str]] = set()
#: this process's TLS channels per deployment (party0, party1, CA digest), shared by its clients
_CHANNELS: dict[tuple[str, str, str], PartyChannels] = {}
_CHANNELS_LOCK = threading.Lock()
_SIDE = ThreadPoolExecutor(4, thread_name_prefix="starfish-register")  #: registrations beside the round check


def _channels(party0: str, party1: str, ca: bytes) -> PartyChannels:
    """The process's channels to these parties, opened on first use. They carry no client
    identity (each call carries its client's own token: client_sdk.channels)."""
    key = (party0, party1, hashlib.sha256(ca).hexdigest())
    with _CHANNELS_LOCK:
        if key not in _CHANNELS:
            _CHANNELS[key] = PartyChannels(party0, party1, ca)
        return _CHANNELS[key]


def _registration_key(client: Client) -> tuple[str, str]:
    """(deployment, client id): a registration holds for this client at these parties only."""
    return federation_id(client.channels.ca_cert, *client.addresses), client.client_id


class StarfishMod:
    """Flower client mod that uploads secret shares to the Starfish parties (see module doc)."""

    def __init__(
        self,
        parties: Parties | None = None,
        identity: Identity | None = None,
        alpha: float = 0.4,
        weight_key: str = eval_reply.WEIGHT,
        compress_mask: bool = True,
        accuracy_key: str = eval_reply.ACCURACY,
    ):
        self.parties = parties  #: None: read from the run/node config of each message (`app_config`)
        self.identity = identity or app_config.identity
        self.alpha = alpha
        self.weight_key = weight_key  #: the sample count in the app's train and evaluate metrics
        self.compress_mask = compress_mask
        self.accuracy_key = accuracy_key  #: the fraction scored correctly in the app's evaluate metrics

    def __call__(self, msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        kind = msg.metadata.message_type
        if kind == MessageType.EVALUATE and _names_tasks(msg):
            handler = self._answer_evaluations
        elif kind == MessageType.TRAIN:
            handler = self._on_train
        else:
            return call_next(msg, context)
        try:
            return handler(msg, context, call_next, _single(msg.content.config_records, "ConfigRecord"))
        except (StarfishError, ValueError, TypeError, KeyError, OSError) as exc:
            log.warning("starfish mod: %s", exc)
            return Message(Error(MOD_FAILED_PRECONDITION, f"StarfishMod: {exc}"), reply_to=msg)

    def _on_train(self, msg: Message, context: Context, call_next: ClientAppCallable, config) -> Message:
        if keys.TASKS in config:
            return self._answer_tasks(msg, context, call_next, config)
        if keys.ROUND in config:
            return self._train_round(msg, context, call_next, config)
        raise ValueError(
            "a train message without a Starfish round: refusing to send the model update to the server in the clear"
        )

    # -- connection ------------------------------------------------------------------------
    def _parties(self, context: Context) -> Parties:
        return self.parties or app_config.StarfishConfig.from_context(context).parties()

    def _client(self, context: Context) -> Client:
        """The SDK client of this message's node, on this process's channels to the parties."""
        client_id, token = self.identity(context)
        parties = self._parties(context)
        ca = parties.ca_bytes()
        return Client(
            client_id,
            token,
            parties.party0,
            parties.party1,
            ca,
            alpha=self.alpha,
            compress_mask=self.compress_mask,
            channels=_channels(parties.party0, parties.party1, ca),
        )

    def _registered(self, client: Client) -> Client:
        """`client`, registered with both parties (once per process and client)."""
        key = _registration_key(client)
        if key not in _REGISTERED:
            client.register()
            _REGISTERED.add(key)
        return client

    def _check_in(self, client: Client) -> RoundView:
        """Both parties' round state; a client not registered from this process registers
        with both at the same time (the four calls in flight together)."""
        key = _registration_key(client)
        if key in _REGISTERED:
            return client.round_state()
        registering = _SIDE.submit(client.register)
        view = client.round_state()
        registering.result()
        _REGISTERED.add(key)
        return view

    def _request_unlearning(self, context: Context, reply: Message) -> str:
        """File the unlearning of this client's own data if the app's reply asks for it
        (`request_unlearning`); the job id, or "" when not asked. The request carries the
        client credential and no parameters: party0 runs it with the operator's parameters
        ([unlearning] parameters), the same policy as the SDK's `request_own_unlearning`."""
        if keys.UNLEARN_ME not in reply.content.config_records:
            return ""
        client_id, token = self.identity(context)
        parties = self._parties(context)
        job_id = request_own_unlearning(parties.party0, client_id, token, parties.ca_bytes())
        log.info("Starfish: %s asked for the unlearning of its own data: job %s", client_id, job_id)
        return job_id

    # -- a training round --------------------------------------------------------------------
    def _train_round(self, msg: Message, context: Context, call_next: ClientAppCallable, config) -> Message:
        round_index, lr, arch = int(config[keys.ROUND]), float(config[keys.LR]), str(config[keys.ARCH])
        arrays = _single(msg.content.array_records, "ArrayRecord")
        before = flatten(arrays)
        started = time.perf_counter()
        with self._client(context) as client:
            view = self._check_in(client)
            if not view.is_open or view.round != round_index:
                raise StarfishError(f"Starfish round {round_index} is not open on both parties (now {view.round})")
            if model_hash(arch, before) != view.model_hash:
                raise StarfishError(
                    f"the server sent a model that is not M_{round_index - 1} of the parties "
                    f"({view.model_hash[:12]}); refusing to train on it"
                )
            checked = time.perf_counter()
            reply = call_next(msg, context)
            if reply.has_error():
                return reply
            trained = time.perf_counter()
            g, n = self._update(reply, before, lr)
            receipt = client.submit(round_index, g, n, model_hash=view.model_hash)
            stamp = ConfigRecord(
                {
                    keys.CLIENT_ID: client.client_id,
                    keys.ROUND: round_index,
                    keys.SHARES: list(receipt.content_sha256),
                    keys.UPLOAD_BYTES: receipt.bytes_sent,
                    keys.SDK_SECONDS: (checked - started) + (time.perf_counter() - trained),
                    keys.UNLEARN_JOB: self._request_unlearning(context, reply),
                }
            )
        return _without_arrays(msg, reply, stamp)

    def _update(self, reply: Message, before: np.ndarray, lr: float) -> tuple[np.ndarray, int]:
        """(g, n) from the app's reply: the pseudo-gradient and the sample count."""
        fitted = flatten(_single(reply.content.array_records, "ArrayRecord"))
        metrics = _single(reply.content.metric_records, "MetricRecord")
        if self.weight_key not in metrics:
            raise KeyError(f"the train reply's metrics lack {self.weight_key!r} (the sample count)")
        return pseudo_gradient(before, fitted, lr), int(metrics[self.weight_key])

    # -- unlearning tasks --------------------------------------------------------------------
    def _answer_tasks(self, msg: Message, context: Context, call_next: ClientAppCallable, config) -> Message:
        """Answer the listed warm-up/correction tasks with the app's train function."""
        lr = float(config[keys.LR])
        template = _single(msg.content.array_records, "ArrayRecord")
        record_keys = _record_keys(msg)

        def grad_fn(params: np.ndarray, task: TaskInfo) -> tuple[np.ndarray, int]:
            content = RecordDict({record_keys[0]: unflatten(params, template), record_keys[1]: config})
            reply = call_next(Message(content=content, metadata=copy.copy(msg.metadata)), context)
            if reply.has_error():
                raise StarfishError(f"the app failed on task {task.task_id}: {reply.error.reason}")
            return self._update(reply, np.asarray(params, dtype=np.float32), lr)

        client_id, answered = self._serve(context, config, grad_fn)
        return _task_reply(msg, client_id, config, keys.ANSWERED, answered)

    # -- evaluation tasks --------------------------------------------------------------------
    def _answer_evaluations(self, msg: Message, context: Context, call_next: ClientAppCallable, config) -> Message:
        """Answer the listed evaluation tasks (docs/JOBS.md §7, step 2): the app's evaluate
        function at M̂ and at M_T, the two replies as counts (`eval_reply`), sent as shares by
        the SDK. A reply that breaks the metric convention stops the answering: nothing is
        sent and the Flower server gets an error naming what is missing."""
        template = _single(msg.content.array_records, "ArrayRecord")
        record_keys = _record_keys(msg)
        stop, refused = threading.Event(), []

        def evaluate(params: np.ndarray, task: TaskInfo, model: str):
            cfg = ConfigRecord({**dict(config), keys.PROBE: task.probe})
            content = RecordDict({record_keys[0]: unflatten(params, template), record_keys[1]: cfg})
            reply = call_next(Message(content=content, metadata=copy.copy(msg.metadata)), context)
            return eval_reply.reply_metrics(reply, model)

        def eval_fn(new: np.ndarray, old: np.ndarray, task: TaskInfo) -> EvalCounts:
            try:
                counts = eval_reply.eval_counts(
                    evaluate(new, task, "M̂"), evaluate(old, task, "M_T"), self.accuracy_key, self.weight_key
                )
                return eval_reply.within_bound(counts, task.max_eval_samples)
            except ValueError as exc:  # the SDK sends nothing for this task; stop waiting for others
                refused.append(str(exc))
                stop.set()
                raise

        def no_training(params: np.ndarray, task: TaskInfo) -> tuple[np.ndarray, int]:
            raise StarfishError(f"task {task.task_id} asks for training; an evaluate message answers evaluations only")

        client_id, answered = self._serve(context, config, no_training, eval_fn, stop)
        if refused:
            raise ValueError(refused[0])
        return _task_reply(msg, client_id, config, keys.EVALUATED, answered)

    def _serve(
        self, context: Context, config, grad_fn, eval_fn: EvalFn | None = None, stop: threading.Event | None = None
    ) -> tuple[str, int]:
        """(client id, tasks answered): the SDK's task loop until the listed tasks are
        answered or their time (``starfish-tasks-until``) is up."""
        stop = stop or threading.Event()
        timer = threading.Timer(max(0.0, float(config[keys.TASKS_UNTIL]) - time.time()), stop.set)
        timer.start()
        try:
            with self._registered(self._client(context)) as client:
                wanted = len(config[keys.TASKS])
                return client.client_id, client.serve_tasks(grad_fn, stop=stop, max_tasks=wanted, eval_fn=eval_fn)
        finally:
            timer.cancel()


def request_unlearning(reply: Message) -> Message:
    """Mark a ClientApp's train reply as this client's request to be unlearned: `StarfishMod`
    uploads the round's shares as usual, then files the unlearning of the client's own data
    at party0 with its client credential (the operator's parameters) and reports the job id
    in the receipt; the strategy runs the job before the next round."""
    reply.content[keys.UNLEARN_ME] = ConfigRecord({keys.UNLEARN_ME: True})
    return reply


def _task_reply(msg: Message, client_id: str, config, counter: str, answered: int) -> Message:
    """The reply to a message naming tasks: how many were answered, no model, no metric of the app."""
    stamp = ConfigRecord({keys.CLIENT_ID: client_id, keys.TASKS: [str(t) for t in config[keys.TASKS]]})
    return Message(RecordDict({"metrics": MetricRecord({counter: answered}), keys.REPLY: stamp}), reply_to=msg)


def _names_tasks(msg: Message) -> bool:
    """Whether the message's config names Starfish tasks (``starfish-tasks``)."""
    return any(keys.TASKS in record for record in msg.content.config_records.values())


def _single(records: dict, what: str):
    if len(records) != 1:
        raise ValueError(f"expected exactly one {what} in the message, found {len(records)}")
    return next(iter(records.values()))


def _record_keys(msg: Message) -> tuple[str, str]:
    """Names of the message's ArrayRecord and ConfigRecord (e.g. "arrays", "config")."""
    return next(iter(msg.content.array_records)), next(iter(msg.content.config_records))


def _without_arrays(msg: Message, reply: Message, stamp: ConfigRecord) -> Message:
    """The app's reply minus every ArrayRecord (and the unlearning wish), plus the Starfish receipt."""
    kept = {k: v for k, v in reply.content.items() if not isinstance(v, ArrayRecord) and k != keys.UNLEARN_ME}
    content = RecordDict(kept)
    content[keys.REPLY] = stamp
    return Message(content, reply_to=msg)
