"""Pass 2 of the code runner: the calls of pass 1 replayed, shuffled, to a fresh server.

Part of the runner that runs inside the sandbox (``_runner.py``). A candidate that answers by call
count instead of by its arguments cannot give the same answers twice (``replay_order``).
"""

import os

from posttrain.envs.code._runner_wire import (
    MAX_MESSAGE_BYTES,
    CandidateGone,
    _gone,
    canonical,
    clean_error,
    decode,
    encode,
)


def reply_key(reply):
    """What pass 2 compares: the canonical value, or the exception's class; None if malformed."""
    import json

    if type(reply) is dict and "ok" in reply:
        try:
            # Compare the value the test would see, re-encoded: a duplicated dict key or another
            # spelling of one value must neither hide a different answer nor make equal ones differ.
            return "ok:" + json.dumps(canonical(encode(decode(reply["ok"]))), separators=(",", ":"))
        except Exception:  # noqa: BLE001 - malformed values of every kind
            return None
    if type(reply) is dict and "exc" in reply:
        return "exc:" + clean_error(reply["exc"])["type"]
    return None


def replay_order(keys, rng, avoid=None):
    """A shuffled order of the distinct calls whose first-pass answers, in that order, differ from
    ``avoid`` whenever the answers are not all equal. ``avoid`` is what a candidate that answers by
    position would send to this many calls: the first answers of pass 1 in call order, repeats
    included (default: ``keys``, the distinct calls' answers in test order). Such a candidate
    cannot give the same answers twice, deterministically."""
    avoid = list(keys if avoid is None else avoid)
    order = list(range(len(keys)))
    rng.shuffle(order)
    if len(set(keys)) > 1:
        for _ in range(64):
            if [keys[i] for i in order] != avoid:
                return order
            rng.shuffle(order)
        # Two orders with different answer sequences exist (the answers are not all equal): the
        # identity and a rotation differ everywhere the sequence is not constant; one of them is
        # not ``avoid``.
        rotation = [*range(1, len(keys)), 0]
        order = rotation if [keys[i] for i in rotation] != avoid else list(range(len(keys)))
    return order


def _stateful(message):
    return {"id": "check", "outcome": "stateful", "error": {"type": "Stateful", "message": message, "where": None}}


def first_answers(log):
    """``{request: (answer, reply size)}`` of pass 1; None if equal requests got different answers."""
    first = {}
    for request, key, size in log:
        if first.setdefault(request, (key, size))[0] != key:
            return None
    return first


REPLAY_CHUNK_BYTES = MAX_MESSAGE_BYTES // 4


def replay_chunks(first, log=()):
    """The distinct calls of pass 1 (``first``: ``first_answers``), in a shuffled order
    (``replay_order``), cut into chunks of at most ``REPLAY_CHUNK_BYTES`` of replies (at least one
    call each); the first chunk goes to the fresh server with its candidate."""
    import random

    requests = list(first)
    by_position = [key for _, key, _ in log][: len(requests)]  # what answering by call count sends
    order = replay_order([first[r][0] for r in requests], random.Random(os.urandom(16)), by_position or None)
    chunks, start = [], 0
    while start < len(order):
        end, size = start, 0
        while end < len(order) and (end == start or size + first[requests[order[end]]][1] < REPLAY_CHUNK_BYTES):
            size += first[requests[order[end]]][1]
            end += 1
        chunks.append([requests[i] for i in order[start:end]])
        start = end
    return chunks or [[]]


def replay(first, proxy, chunks):
    """Pass 2: ``chunks`` (``replay_chunks``) answered by a fresh server (the first was sent with its
    candidate: ``proxy.ahead``); None if every answer equals the first pass's, else the report's
    check entry."""
    for i, chunk in enumerate(chunks):
        try:
            replies = [proxy.exchange(r) for r in chunk] if i == 0 else proxy.exchange_calls(chunk)
        except CandidateGone:
            return _gone(proxy.gone)
        for request, reply in zip(chunk, replies, strict=True):
            if reply_key(reply) != first[request][0]:
                return _stateful("a fresh process answered the same calls, in another order, differently: "
                                 "answers must depend on the arguments only")
    return None
