"""Fuzz the sans-IO codec: bad bytes may only ever raise PulsarWireError subclasses.

Run: ``make fuzz`` or ``python bench/fuzz_codec.py --runs 1000000 [--seed N] [--engine ...]``.

Every input goes through the whole receive path: :class:`FrameDecoder` (fed in two pieces,
checksum verified or not, so corrupt metadata and payloads also reach the deeper decoders),
then :func:`open_entry` (decompression, batch split) on every decoded payload — checked against
the column decoder ``split_batch_columns`` (same payloads or the same error) — and
``MessageId.from_proto`` on every MESSAGE. PulsarWireErrors are expected and counted per class;
any other exception is a bug: the input is printed as hex (and saved under ``--artifacts``) and
the run exits with status 1. ``--replay HEX|FILE`` runs a single input again.

Engines:

* ``atheris`` (coverage-guided libFuzzer; ``pip install atheris``) when it is importable;
* ``builtin``: a self-contained mutation fuzzer. The seed corpus is valid traffic built with our
  encoder (commands, SEND, MESSAGE with batches under every compression, broker entry metadata,
  multi-frame streams); mutations are bit flips, byte sets, interesting values, truncations,
  insertions, deletions, duplications, splices of two inputs and rewrites of the u32 size fields.
  Inputs that produce a new outcome signature (error sequence, frame count) join the corpus.
  ``--seed`` makes a run reproducible.

``auto`` (the default) picks atheris when present. The summary gives runs/second.

``--protocol kafka`` fuzzes the Kafka codec instead (``pulsarwire.kafka.codec``): the seed corpus
is the golden request frames of confluent-kafka, kafka-python and aiokafka
(``tests/pulsarwire/kafka/golden``); each input goes through ``FrameSplitter`` (in two pieces),
``decode_request`` on every frame, and ``decode_batches`` on every records field of a Produce
request. Only KafkaWireErrors (PulsarWireErrors) may come out.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import os
import random
import shutil
import struct
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

U32 = struct.Struct(">I")
MAX_MESSAGE = 64 * 1024
MAX_UNCOMPRESSED = 256 * 1024
INTERESTING_U32 = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 16, 127, 128, 255, 256, 0x7FFF, 0x8000, 0xFFFF,
                   MAX_MESSAGE, MAX_MESSAGE + 10 * 1024, MAX_MESSAGE + 10 * 1024 + 1,
                   2**31 - 1, 2**31, 2**32 - 1]  # fmt: skip
INTERESTING_BYTES = [0x00, 0x01, 0x02, 0x08, 0x0E, 0x10, 0x7F, 0x80, 0xFF]

# The codec is imported lazily (see _load) so that atheris can instrument it first.
PROTOCOL = "pulsar"  # or "kafka" (--protocol)
KAFKA_GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "pulsarwire" / "kafka" / "golden"
kafka: Any = None
codec: Any = None
errors: Any = None
pb: Any = None
is_batch: Any = None
split_batch_columns: Any = None
uncompressed_payload: Any = None


def _load() -> None:
    global codec, errors, pb, is_batch, split_batch_columns, uncompressed_payload, kafka
    if PROTOCOL == "kafka":
        import types

        import pulsarwire.errors as errors_mod
        from pulsarwire.kafka.codec import frames, messages, records

        kafka = types.SimpleNamespace(frames=frames, messages=messages, records=records)
        errors = errors_mod
        return
    import pulsarwire.codec as codec_mod
    import pulsarwire.errors as errors_mod
    from pulsarwire.codec.batch import is_batch as is_batch_fn
    from pulsarwire.codec.batch import split_batch_columns as columns_fn
    from pulsarwire.codec.entry import uncompressed_payload as uncompressed_fn
    from pulsarwire.proto import pb as pb_mod

    codec, errors, pb = codec_mod, errors_mod, pb_mod
    is_batch, split_batch_columns, uncompressed_payload = is_batch_fn, columns_fn, uncompressed_fn


# ---------------------------------------------------------------------------
# the target
# ---------------------------------------------------------------------------


@dataclass
class Stats:
    runs: int = 0
    clean: int = 0  # inputs that decoded without any error
    frames: int = 0
    messages: int = 0
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    started: float = field(default_factory=time.perf_counter)

    def summary(self, engine: str, seed: int | None) -> str:
        elapsed = time.perf_counter() - self.started
        rate = self.runs / elapsed if elapsed > 0 else 0.0
        lines = [
            f"engine={engine} seed={seed} runs={self.runs} time={elapsed:.1f}s rate={rate:,.0f} runs/s",
            f"clean inputs={self.clean} frames decoded={self.frames} messages opened={self.messages}",
            "first error per input:",
        ]
        for name, n in self.outcomes.most_common():
            lines.append(f"  {name:32s} {n:>10,d}  {100 * n / max(self.runs, 1):5.1f}%")
        return "\n".join(lines)


def target(data: bytes, verify_checksum: bool, split: int) -> tuple[str, ...]:
    """Decode ``data``; returns the PulsarWireError class names seen, in order (plus frame markers).

    Anything else propagates.
    """
    if PROTOCOL == "kafka":
        return kafka_target(data, split)
    seen: list[str] = []
    dec = codec.FrameDecoder(MAX_MESSAGE, verify_checksum=verify_checksum)
    split = min(split, len(data))
    for piece in (data[:split], data[split:]):
        dec.feed(piece)
        while True:
            before = dec.buffered
            try:
                frame = dec.next_frame()
            except errors.FrameError as exc:  # fatal to the stream
                seen.append(type(exc).__name__)
                return tuple(seen)
            except errors.PulsarWireError as exc:
                seen.append(type(exc).__name__)
                if dec.buffered >= before:
                    raise AssertionError(f"{type(exc).__name__} did not consume its frame") from exc
                continue
            if frame is None:
                break
            seen.append(f"#{frame.type}")
            if frame.type == pb.BaseCommand.MESSAGE:
                codec.MessageId.from_proto(frame.sub.message_id)
            if frame.payload is not None:
                seen.append(_entry(frame.payload.metadata, frame.payload.payload))
    try:
        dec.eof()
    except errors.PulsarWireError as exc:
        seen.append(type(exc).__name__)
    return tuple(seen)


def kafka_target(data: bytes, split: int) -> tuple[str, ...]:
    """The Kafka receive path: frames, requests, and the record batches of Produce requests."""
    seen: list[str] = []
    splitter = kafka.frames.FrameSplitter(MAX_MESSAGE)
    split = min(split, len(data))
    for piece in (data[:split], data[split:]):
        splitter.feed(piece)
        while True:
            try:
                frame = splitter.next_frame()
            except errors.PulsarWireError as exc:  # a bad size is fatal to the stream
                seen.append(type(exc).__name__)
                return tuple(seen)
            if frame is None:
                break
            try:
                req = kafka.messages.decode_request(frame)
            except errors.PulsarWireError as exc:
                seen.append(type(exc).__name__)
                continue
            seen.append(f"#{req.api_key}")
            if req.api_name == "Produce":
                for topic in req.body["topic_data"]:
                    for part in topic["partition_data"]:
                        try:
                            batches = kafka.records.decode_batches(
                                part["records"] or b"", max_decompressed=MAX_UNCOMPRESSED
                            )
                        except errors.PulsarWireError as exc:
                            seen.append(type(exc).__name__)
                        else:
                            seen.append(f"m{min(sum(len(b.records) for b in batches), 8)}")
    return tuple(seen)


def _entry(md: Any, payload: bytes) -> str:
    """open_entry's outcome (message count or error class); for a batch the column decoder
    (split_batch_columns, the bulk reader's path) must give the same payloads or the same error."""
    try:
        msgs = codec.open_entry(md, payload, MAX_UNCOMPRESSED)
    except errors.PulsarWireError as exc:
        outcome, payloads = type(exc).__name__, None
    else:
        outcome, payloads = f"m{min(len(msgs), 8)}", [m.payload for m in msgs]
    if is_batch(md):
        try:
            data = uncompressed_payload(md, payload, MAX_UNCOMPRESSED)
            columns: Any = split_batch_columns(data, md.num_messages_in_batch).payloads
        except errors.PulsarWireError as exc:
            columns = type(exc).__name__
        if columns != (payloads if payloads is not None else outcome):
            raise AssertionError(f"split_batch_columns gives {columns!r:.200}, open_entry {outcome}")
    return outcome


class Crash(Exception):
    pass


def check(data: bytes, verify_checksum: bool, split: int, stats: Stats) -> tuple[str, ...]:
    """Run one input, update ``stats``; raise Crash (after printing it) on a non-PulsarWireError."""
    stats.runs += 1
    try:
        signature = target(data, verify_checksum, split)
    except Exception as exc:
        print("\n=== non-PulsarWireError ===", file=sys.stderr)
        traceback.print_exc()
        print(f"verify_checksum={verify_checksum} split={split} len={len(data)}", file=sys.stderr)
        print(f"input hex: {data.hex()}", file=sys.stderr)
        raise Crash(type(exc).__name__) from exc
    first_error = next((s for s in signature if not s.startswith(("#", "m"))), None)
    if first_error is None:
        stats.clean += 1
        stats.outcomes["(no error)"] += 1
    else:
        stats.outcomes[first_error] += 1
    stats.frames += sum(1 for s in signature if s.startswith("#"))
    stats.messages += sum(int(s[1:]) for s in signature if s.startswith("m"))
    return signature


def save_artifact(data: bytes, directory: str, verify_checksum: bool, split: int) -> Path:
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    name = f"crash-{hashlib.sha1(data).hexdigest()}-v{int(verify_checksum)}-s{split}.bin"
    out = path / name
    out.write_bytes(data)
    return out


# ---------------------------------------------------------------------------
# seed corpus
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Seed:
    data: bytes
    size_fields: tuple[int, ...]  # offsets of u32 size fields


def _meta(**kw: Any) -> Any:
    md = pb.MessageMetadata(producer_name="fuzz", sequence_id=7, publish_time=1_700_000_000_000)
    for k, v in kw.items():
        setattr(md, k, v)
    return md


def _payload_seed(cmd: Any, md: Any, payload: bytes, bem: Any) -> Seed:
    data = codec.encode_payload_command(cmd, md, payload, bem)
    pos = 8 + len(cmd.SerializeToString())
    offsets = [0, 4]
    if bem is not None:
        offsets.append(pos + 2)
        pos += 6 + len(bem.SerializeToString())
    offsets.append(pos + 6)
    return Seed(data, tuple(offsets))


def kafka_corpus() -> list[Seed]:
    """The golden frames of the three Kafka clients, each with its size prefix, and a stream of all."""
    frames = [p.read_bytes() for p in sorted(KAFKA_GOLDEN.glob("*.bin"))]
    seeds = [Seed(kafka.frames.join(f), (0,)) for f in frames]
    stream = b"".join(s.data for s in seeds[:8])
    offsets, pos = [], 0
    for s in seeds[:8]:
        offsets.append(pos)
        pos += len(s.data)
    seeds.append(Seed(stream, tuple(offsets)))
    return seeds


def build_corpus() -> list[Seed]:
    if PROTOCOL == "kafka":
        return kafka_corpus()
    T = pb.BaseCommand
    seeds: list[Seed] = []
    for kind in (T.PING, T.PONG):
        seeds.append(Seed(codec.encode_command(codec.new_command(kind)[0]), (0, 4)))
    cmd, sub = codec.new_command(T.CONNECT)
    sub.client_version, sub.protocol_version = "fuzz", 21
    seeds.append(Seed(codec.encode_command(cmd), (0, 4)))
    cmd, sub = codec.new_command(T.FLOW)
    sub.consumer_id, sub.messagePermits = 1, 1000
    seeds.append(Seed(codec.encode_command(cmd), (0, 4)))
    cmd, sub = codec.new_command(T.ACK)
    sub.consumer_id, sub.ack_type = 1, pb.CommandAck.Individual
    mid = sub.message_id.add()
    mid.ledgerId, mid.entryId, mid.batch_index = 5, 6, 2
    mid.ack_set.extend(codec.ack_set_for(10, [0, 1, 3]))
    seeds.append(Seed(codec.encode_command(cmd), (0, 4)))

    cmd, sub = codec.new_command(T.SEND)
    sub.producer_id, sub.sequence_id = 1, 2
    seeds.append(_payload_seed(cmd, _meta(partition_key="k"), b"a single message", None))
    chunk_md = _meta(uuid="u-1", chunk_id=0, num_chunks_from_msg=2, total_chunk_msg_size=10)
    seeds.append(_payload_seed(cmd, chunk_md, b"chunk", None))

    entries = [
        (
            pb.SingleMessageMetadata(partition_key=f"key-{i}", sequence_id=i, event_time=1000 + i),
            bytes([i]) * (5 * i),
        )
        for i in range(6)
    ]
    entries[2][0].properties.add(key="a", value="b")
    entries[3][0].ordering_key = b"ok"
    raw = codec.encode_batch(entries)
    bem = pb.BrokerEntryMetadata(broker_timestamp=1_700_000_000_123, index=41)
    for codec_type in (pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY):
        for with_bem in (False, True):
            cmd, sub = codec.new_command(T.MESSAGE)
            sub.consumer_id = 1
            sub.message_id.ledgerId, sub.message_id.entryId = 100 + codec_type, 7
            md = _meta(num_messages_in_batch=len(entries), uncompressed_size=len(raw), compression=codec_type)
            seeds.append(_payload_seed(cmd, md, codec.compress(codec_type, raw), bem if with_bem else None))
        # a compressed single message too
        md = _meta(uncompressed_size=300, compression=codec_type)
        seeds.append(_payload_seed(cmd, md, codec.compress(codec_type, b"xyz" * 100), None))
    seeds.append(Seed(b"".join(s.data for s in seeds[:4]) + seeds[-1].data, (0, 4)))
    seeds.append(Seed(b"".join(s.data for s in seeds[5:9]), (0, 4)))
    return seeds


# ---------------------------------------------------------------------------
# builtin mutation engine
# ---------------------------------------------------------------------------


class Mutator:
    def __init__(self, rng: random.Random, seeds: list[Seed], max_len: int) -> None:
        self.rng = rng
        self.corpus: list[Seed] = list(seeds)
        self.max_len = max_len

    def _pos(self, b: bytearray, end_ok: bool = False) -> int:
        return self.rng.randrange(len(b) + (1 if end_ok else 0))

    def mutate(self, seed: Seed) -> bytes:
        rng = self.rng
        b = bytearray(seed.data)
        for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4, 8))):
            op = rng.randrange(11)
            if op == 0 and b:  # bit flip
                b[self._pos(b)] ^= 1 << rng.randrange(8)
            elif op == 1 and b:  # random byte
                b[self._pos(b)] = rng.randrange(256)
            elif op == 2 and b:  # interesting byte
                b[self._pos(b)] = rng.choice(INTERESTING_BYTES)
            elif op == 3 and len(b) >= 4:  # interesting u32 anywhere
                i = rng.randrange(len(b) - 3)
                b[i : i + 4] = U32.pack(rng.choice(INTERESTING_U32))
            elif op == 4 and seed.size_fields:  # rewrite a known size field
                off = rng.choice(seed.size_fields)
                if off + 4 <= len(b):
                    old = U32.unpack_from(b, off)[0]
                    new = rng.choice(
                        [
                            rng.choice(INTERESTING_U32),
                            (old + rng.randint(-8, 8)) % 2**32,
                            rng.randrange(2**32),
                        ]
                    )
                    b[off : off + 4] = U32.pack(new)
            elif op == 5 and b:  # truncate
                del b[self._pos(b) :]
            elif op == 6:  # insert random bytes
                i = self._pos(b, end_ok=True)
                b[i:i] = rng.randbytes(rng.randint(1, 16))
            elif op == 7 and b:  # delete a range
                i = self._pos(b)
                del b[i : i + rng.randint(1, 32)]
            elif op == 8 and b:  # duplicate a range
                i = self._pos(b)
                j = min(len(b), i + rng.randint(1, 64))
                k = self._pos(b, end_ok=True)
                b[k:k] = b[i:j]
            elif op == 9:  # splice with another input
                other = rng.choice(self.corpus).data
                i = self._pos(b, end_ok=True)
                j = rng.randrange(len(other) + 1)
                b = b[:i] + bytearray(other[j:])
            elif op == 10 and b:  # append a valid frame
                b += rng.choice(self.corpus).data
        if len(b) > self.max_len:
            del b[self.max_len :]
        return bytes(b)


def coarse_signature(sig: tuple[str, ...]) -> tuple[object, ...]:
    """What makes an input interesting enough to keep: which errors, how far it got."""
    errs = frozenset(s for s in sig if not s.startswith(("#", "m")))
    frames = min(sum(1 for s in sig if s.startswith("#")), 4)
    opened = any(s.startswith("m") for s in sig)
    return (errs, frames, opened)


def run_builtin(runs: int, seed: int, max_len: int, max_seconds: float | None, artifacts: str) -> int:
    _load()
    rng = random.Random(seed)
    seeds = build_corpus()
    mutator = Mutator(rng, seeds, max_len)
    stats = Stats()
    signatures: set[tuple[object, ...]] = set()
    deadline = None if max_seconds is None else time.perf_counter() + max_seconds
    for s in seeds:  # the corpus itself must decode cleanly
        try:
            sig = check(s.data, True, len(s.data), stats)
        except Crash:
            path = save_artifact(s.data, artifacts, True, len(s.data))
            print(f"saved {path}; replay: python bench/fuzz_codec.py --replay {path}", file=sys.stderr)
            return 1
        if any(not x.startswith(("#", "m")) for x in sig):
            print(f"seed corpus entry does not decode cleanly: {sig}", file=sys.stderr)
            return 2
        signatures.add(coarse_signature(sig))
    while stats.runs < runs:
        if deadline is not None and stats.runs % 1000 == 0 and time.perf_counter() > deadline:
            break
        parent = rng.choice(seeds if rng.random() < 0.5 else mutator.corpus)
        data = mutator.mutate(parent)
        verify = rng.random() < 0.5
        split = rng.randrange(len(data) + 1)
        try:
            sig = check(data, verify, split, stats)
        except Crash:
            path = save_artifact(data, artifacts, verify, split)
            print(f"saved {path}; replay: python bench/fuzz_codec.py --replay {path}", file=sys.stderr)
            print(stats.summary("builtin", seed))
            return 1
        coarse = coarse_signature(sig)
        if coarse not in signatures and len(mutator.corpus) < 5000:
            signatures.add(coarse)
            mutator.corpus.append(Seed(data, parent.size_fields))
    print(stats.summary("builtin", seed))
    print(
        f"corpus: {len(seeds)} seeds + {len(mutator.corpus) - len(seeds)} inputs with new outcome signatures"
    )
    return 0


# ---------------------------------------------------------------------------
# atheris engine
# ---------------------------------------------------------------------------


def run_atheris(runs: int, seed: int, max_len: int, max_seconds: float | None, artifacts: str) -> int:
    import atheris

    with atheris.instrument_imports(include=["pulsarwire"]):
        _load()
    stats = Stats()
    seeds = build_corpus()
    corpus_dir = tempfile.mkdtemp(prefix="pulsarwire-fuzz-")
    for i, s in enumerate(seeds):
        Path(corpus_dir, f"seed-{i:03d}").write_bytes(s.data)
    deadline = None if max_seconds is None else time.perf_counter() + max_seconds

    def finish(code: int) -> None:
        shutil.rmtree(corpus_dir, ignore_errors=True)
        print(stats.summary("atheris", seed), flush=True)
        sys.stderr.flush()
        os._exit(code)

    def test_one_input(data: bytes) -> None:
        # Derive the decoder options from the input so that libFuzzer can replay it.
        verify = len(data) % 2 == 0
        split = (len(data) * 2) // 3
        try:
            check(data, verify, split, stats)
        except Crash:
            path = save_artifact(data, artifacts, verify, split)
            print(f"saved {path}; replay: python bench/fuzz_codec.py --replay {path}", file=sys.stderr)
            finish(1)
        if stats.runs >= runs or (
            deadline is not None and stats.runs % 1000 == 0 and time.perf_counter() > deadline
        ):
            finish(0)

    argv = [sys.argv[0], f"-seed={seed}", f"-max_len={max_len}", "-rss_limit_mb=4096", corpus_dir]
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()
    return 0  # not reached: Fuzz() never returns


# ---------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------


def replay(arg: str) -> int:
    _load()
    path = Path(arg)
    if path.exists():
        data = path.read_bytes()
        parts = {p[0]: p[1:] for p in path.stem.split("-")[2:] if p[:1] in ("v", "s")}
        modes = [(parts.get("v", "1") == "1", int(parts.get("s", len(data))))]
    else:
        data = bytes.fromhex(arg)
        modes = [
            (v, s)
            for v in (True, False)
            for s in sorted({0, len(data) // 3, (len(data) * 2) // 3, len(data)})
        ]
    stats = Stats()
    for verify, split in modes:
        try:
            sig = check(data, verify, split, stats)
        except Crash:
            return 1
        print(f"verify_checksum={verify} split={split}: {' '.join(sig) or '(nothing)'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000, help="number of inputs to run")
    parser.add_argument("--seed", type=int, default=None, help="RNG seed (default: random, printed)")
    parser.add_argument("--engine", choices=("auto", "builtin", "atheris"), default="auto")
    parser.add_argument("--max-len", type=int, default=16 * 1024, help="longest input in bytes")
    parser.add_argument("--max-seconds", type=float, default=None, help="stop after this long")
    parser.add_argument("--artifacts", default=".run/fuzz", help="directory for crashing inputs")
    parser.add_argument("--replay", metavar="HEX|FILE", help="run one input and print what it decodes to")
    parser.add_argument(
        "--protocol", choices=("pulsar", "kafka"), default="pulsar", help="which codec to fuzz"
    )
    args = parser.parse_args(argv)
    global PROTOCOL
    PROTOCOL = args.protocol

    if args.replay:
        return replay(args.replay)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    engine = args.engine
    if engine == "auto":
        try:
            import atheris  # noqa: F401
        except ImportError:
            engine = "builtin"
        else:
            engine = "atheris"
    print(f"fuzzing the {PROTOCOL} codec: engine={engine} runs={args.runs} seed={seed}", flush=True)
    if engine == "atheris":
        return run_atheris(args.runs, seed, args.max_len, args.max_seconds, args.artifacts)
    return run_builtin(args.runs, seed, args.max_len, args.max_seconds, args.artifacts)


if __name__ == "__main__":
    sys.exit(main())
