"""Frame layer of the Pulsar binary protocol: split a byte stream into frames and build frames.

Grammar (all integers big-endian, unsigned)::

    frame          := total_size:u32 command_size:u32 command[command_size] payload_section?
    payload_section:= broker_entry? entry
    entry          := (0x0e01 checksum:u32)? metadata_size:u32 metadata[metadata_size] payload
    broker_entry   := 0x0e02 broker_entry_metadata_size:u32 broker_entry_metadata[..size]

``total_size`` counts every byte after itself. ``command`` is a BaseCommand,
``metadata`` a MessageMetadata and ``broker_entry_metadata`` a
BrokerEntryMetadata protobuf; ``payload`` is everything left in the frame.
``checksum`` is CRC32C over ``metadata_size``, ``metadata`` and ``payload``.
The checksum section is optional, as in Apache Pulsar (``Commands.hasChecksum``):
without the 0x0e01 magic the entry starts at ``metadata_size`` and nothing is
verified. The two layouts cannot be confused: a metadata size starting with the
bytes 0x0e01 would be over 235 MB, past any frame.

:class:`FrameDecoder` is sans-IO: feed it any chunks (a byte at a time works)
and pull whole :class:`Frame` objects out. Every size is checked against the
bytes actually present and against the negotiated maximum *before* anything
is allocated from it. Errors of the outer framing are fatal to the stream;
errors inside a complete frame (bad magic, checksum, metadata) are raised after
the frame has been consumed, so the stream stays aligned and the caller
decides whether to go on.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, cast

import crc32c as _crc32c
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from pulsarwire.errors import (
    BadMagicError,
    BrokerEntryMetadataError,
    ChecksumMismatchError,
    CommandSizeError,
    FrameTooLargeError,
    FrameTooShortError,
    MalformedCommandError,
    MalformedMetadataError,
    MetadataSizeError,
    MissingSubCommandError,
    PayloadError,
    TruncatedFrameError,
    UnknownCommandTypeError,
)
from pulsarwire.proto import pb

U32 = struct.Struct(">I")
U16 = struct.Struct(">H")
SIZES = struct.Struct(">II")  # total_size, command_size
MAGIC_AND_CHECKSUM = struct.Struct(">HI")  # 0x0e01, crc32c

MAGIC_CRC32C = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02

DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
#: Slack allowed on top of max_message_size for command and metadata (as Pulsar does).
FRAME_PADDING = 10 * 1024
MIN_FRAME_SIZE = 8  # total_size + command_size
_MAX_U31 = 2**31 - 1

# BaseCommand.Type value N names the sub-message in field number N.
_SUB_FIELD: dict[int, str] = {f.number: f.name for f in pb.BaseCommand.DESCRIPTOR.fields if f.name != "type"}
assert set(_SUB_FIELD) == set(pb.BaseCommand.Type.values()), "BaseCommand types and fields out of step"
# Sub-messages with no fields carry nothing; clients may leave them unset (PING, PONG).
_EMPTY_SUBS = frozenset(
    n
    for n, name in _SUB_FIELD.items()
    if not getattr(pb.BaseCommand.DESCRIPTOR.fields_by_name[name].message_type, "fields", ())
)


# ServerError fields per command type. Pulsar's enums are closed (proto2): a code newer than our
# schema is kept as an unknown field and leaves the field unset, and a *required* one (ERROR,
# SEND_ERROR) would make the whole command look malformed. Such a code reads as UnknownError.
def _server_error_fields(sub_field: str) -> tuple[FieldDescriptor, ...]:
    sub = pb.BaseCommand.DESCRIPTOR.fields_by_name[sub_field].message_type
    assert sub is not None
    return tuple(f for f in sub.fields if f.enum_type is not None and f.enum_type.name == "ServerError")


_SERVER_ERROR_FIELDS: dict[int, tuple[FieldDescriptor, ...]] = {
    n: fields for n, name in _SUB_FIELD.items() if (fields := _server_error_fields(name))
}


def _unknown_server_errors(sub: Message, fields: tuple[FieldDescriptor, ...]) -> None:
    """Set each ServerError field that holds a code our schema does not know to UnknownError,
    naming the code in the sub-command's ``message`` when it has one."""
    unset = {f.number: f for f in fields if not sub.HasField(f.name)}
    if not unset:
        return
    unknown = UnknownFieldSet(sub)
    for i in range(len(unknown)):
        field = unset.get(unknown[i].field_number)
        if field is None or not isinstance(unknown[i].data, int):
            continue
        setattr(sub, field.name, pb.UnknownError)
        text_field = sub.DESCRIPTOR.fields_by_name.get("message")
        if text_field is not None:
            note = f"server error code {unknown[i].data} unknown to this client"
            text = getattr(sub, text_field.name)
            setattr(sub, text_field.name, f"{text} ({note})" if text else note)


def _missing_required(msg: Message) -> str:
    """Names of the unset required fields of ``msg`` (or a hint that a nested message lacks some)."""
    missing = [f.name for f in msg.DESCRIPTOR.fields if f.is_required and not msg.HasField(f.name)]
    return ", ".join(missing) or "in a nested message"


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC32C (Castagnoli) of ``data``, continuing from ``value``."""
    return int(_crc32c.crc32c(data, value))


def sub_command(cmd: pb.BaseCommand) -> Any:
    """The sub-message selected by ``cmd.type`` (e.g. ``cmd.send`` for SEND)."""
    return getattr(cmd, _SUB_FIELD[cmd.type])


def new_command(type_: int) -> tuple[pb.BaseCommand, Any]:
    """A BaseCommand of ``type_`` with its sub-message present; returns (command, sub-message)."""
    cmd = pb.BaseCommand()
    cmd.type = cast(Any, type_)
    sub = getattr(cmd, _SUB_FIELD[type_])
    sub.SetInParent()
    return cmd, sub


@dataclass(frozen=True, slots=True)
class Payload:
    """The payload section of a SEND or MESSAGE frame, checksum (when present) already verified."""

    metadata: pb.MessageMetadata
    payload: bytes
    broker_entry_metadata: pb.BrokerEntryMetadata | None = None
    #: The entry: the section after any broker entry metadata (magic and checksum when present,
    #: metadata, payload): what a broker stores and sends back in MESSAGE frames.
    entry: bytes = b""


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded frame: the command and, for SEND/MESSAGE frames, the payload section."""

    command: pb.BaseCommand
    payload: Payload | None = None

    @property
    def type(self) -> int:
        return int(self.command.type)

    @property
    def sub(self) -> Any:
        return sub_command(self.command)


# ---------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------


def decode_command(data: bytes) -> pb.BaseCommand:
    """Parse a BaseCommand and check that its type is known and its sub-message present.

    Raises MalformedCommandError, UnknownCommandTypeError or MissingSubCommandError.
    """
    cmd = pb.BaseCommand()
    try:
        cmd.MergeFromString(data)
    except (DecodeError, ValueError) as exc:
        raise MalformedCommandError(f"command is not a valid BaseCommand: {exc}") from None
    if not cmd.HasField("type"):
        unknown = UnknownFieldSet(cmd)
        for i in range(len(unknown)):
            if unknown[i].field_number == 1:
                raise UnknownCommandTypeError(f"unknown command type {unknown[i].data}")
        raise MalformedCommandError("command has no type")
    name = _SUB_FIELD[cmd.type]
    if not cast(Message, cmd).HasField(name):
        if cmd.type in _EMPTY_SUBS:
            getattr(cmd, name).SetInParent()
        else:
            raise MissingSubCommandError(
                f"{pb.BaseCommand.Type.Name(cmd.type)} command without its '{name}' sub-message"
            )
    fields = _SERVER_ERROR_FIELDS.get(cmd.type)
    if fields:
        _unknown_server_errors(sub_command(cmd), fields)
    if not cmd.IsInitialized():
        missing = _missing_required(sub_command(cmd))
        raise MalformedCommandError(
            f"{pb.BaseCommand.Type.Name(cmd.type)} missing required fields: {missing}"
        )
    return cmd


def decode_metadata(data: bytes) -> pb.MessageMetadata:
    """Parse a MessageMetadata, requiring producer_name, sequence_id and publish_time."""
    md = pb.MessageMetadata()
    try:
        md.MergeFromString(data)
    except (DecodeError, ValueError) as exc:
        raise MalformedMetadataError(f"message metadata is not valid protobuf: {exc}") from None
    if not md.IsInitialized():
        missing = _missing_required(md)
        raise MalformedMetadataError(f"message metadata missing required fields: {missing}")
    return md


def _message_id_of(cmd: pb.BaseCommand) -> Any:
    if cmd.type == pb.BaseCommand.MESSAGE:
        from pulsarwire.codec.message_id import MessageId

        return MessageId.from_proto(cmd.message.message_id)
    if cmd.type == pb.BaseCommand.SEND:
        return f"producer {cmd.send.producer_id} sequence {cmd.send.sequence_id}"
    return None


def decode_payload_section(
    cmd: pb.BaseCommand, data: bytes | memoryview, *, verify_checksum: bool = True
) -> Payload:
    """Decode the bytes after the command of a payload frame.

    Raises BadMagicError, BrokerEntryMetadataError, ChecksumMismatchError,
    MetadataSizeError or MalformedMetadataError.
    """
    view = memoryview(data)
    end = len(view)
    pos = 0
    bem: pb.BrokerEntryMetadata | None = None
    if end >= 2 and U16.unpack_from(view, 0)[0] == MAGIC_BROKER_ENTRY_METADATA:
        if end < 6:
            raise BrokerEntryMetadataError("broker entry metadata size is truncated")
        (bem_size,) = U32.unpack_from(view, 2)
        if bem_size > end - 6:
            raise BrokerEntryMetadataError(
                f"broker entry metadata size {bem_size} is past the frame ({end - 6})"
            )
        bem = pb.BrokerEntryMetadata()
        try:
            bem.MergeFromString(bytes(view[6 : 6 + bem_size]))
        except (DecodeError, ValueError) as exc:
            raise BrokerEntryMetadataError(f"broker entry metadata is not valid protobuf: {exc}") from None
        pos = 6 + bem_size
    body_start, md_start, md_size = entry_layout(view, pos)
    if verify_checksum and body_start > pos:
        (checksum,) = U32.unpack_from(view, pos + 2)
        actual = crc32c(view[body_start:])
        if actual != checksum:
            mid = _message_id_of(cmd)
            raise ChecksumMismatchError(
                f"CRC32C mismatch (expected 0x{checksum:08x}, computed 0x{actual:08x})"
                + (f" for message {mid}" if mid is not None else ""),
                expected=checksum,
                actual=actual,
                message_id=mid,
            )
    metadata = decode_metadata(bytes(view[md_start : md_start + md_size]))
    entry = bytes(view[pos:])
    return Payload(metadata, entry[md_start - pos + md_size :], bem, entry)


def entry_layout(data: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int, int]:
    """Where the parts of the entry starting at ``pos`` lie: (body start, metadata start, metadata size).

    The body (what the checksum covers) starts at ``pos + 6`` after a 0x0e01 magic and checksum,
    at ``pos`` when the entry has no checksum section. Raises BadMagicError when the bytes are
    neither a checksum section nor a metadata size that fits, MetadataSizeError when the metadata
    size after a checksum section is past the end.
    """
    end = len(data)
    if end - pos >= 2 and U16.unpack_from(data, pos)[0] == MAGIC_CRC32C:
        if end - pos < 10:
            raise BadMagicError(
                f"payload section of {end - pos} bytes is too short for magic, checksum and size"
            )
        body_start = pos + 6
        (md_size,) = U32.unpack_from(data, body_start)
        if md_size > end - body_start - 4:
            raise MetadataSizeError(
                f"metadata size {md_size} is past the frame ({end - body_start - 4} bytes left)"
            )
        return body_start, body_start + 4, md_size
    if end - pos < 4:
        raise BadMagicError(f"payload section of {end - pos} bytes is too short for a metadata size")
    (md_size,) = U32.unpack_from(data, pos)
    if md_size > end - pos - 4:
        raise BadMagicError(
            f"payload section starts with neither the 0x0e01 magic nor a metadata size that fits"
            f" (got 0x{md_size >> 16:04x}...)"
        )
    return pos, pos + 4, md_size


class FrameDecoder:
    """Incremental frame splitter (sans-IO).

    ``feed(data)`` appends bytes; ``next_frame()`` returns the next complete
    :class:`Frame` or None when more bytes are needed; ``eof()`` reports a
    stream that ended mid-frame. ``max_frame_size`` bounds ``total_size``;
    call :meth:`set_max_message_size` after CONNECTED.
    """

    __slots__ = ("_buf", "_pos", "max_frame_size", "verify_checksum")

    def __init__(
        self, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE, *, verify_checksum: bool = True
    ) -> None:
        self._buf = bytearray()
        self._pos = 0
        self.max_frame_size = max_message_size + FRAME_PADDING
        self.verify_checksum = verify_checksum

    def set_max_message_size(self, max_message_size: int) -> None:
        self.max_frame_size = max_message_size + FRAME_PADDING

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._pos and self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf) - self._pos

    def eof(self) -> None:
        """Declare the end of the stream; raises TruncatedFrameError if a frame was cut."""
        if self.buffered:
            raise TruncatedFrameError(f"stream ended with {self.buffered} bytes of an incomplete frame")

    def __iter__(self) -> FrameDecoder:
        return self

    def __next__(self) -> Frame:
        frame = self.next_frame()
        if frame is None:
            raise StopIteration
        return frame

    def next_frame(self) -> Frame | None:
        buf, pos = self._buf, self._pos
        avail = len(buf) - pos
        if avail < 4:
            return None
        (total,) = U32.unpack_from(buf, pos)
        if total > _MAX_U31 or total > self.max_frame_size:
            raise FrameTooLargeError(f"frame of {total} bytes is over the limit of {self.max_frame_size}")
        if total < MIN_FRAME_SIZE - 4:
            raise FrameTooShortError(f"frame total size {total} is below the minimum of 4")
        if avail < 8:
            return None
        (cmd_size,) = U32.unpack_from(buf, pos + 4)
        if cmd_size == 0:
            raise CommandSizeError("command size is 0")
        if cmd_size > total - 4:
            raise CommandSizeError(f"command size {cmd_size} is past the frame ({total - 4} bytes)")
        if avail < 4 + total:
            return None
        start = pos + 8
        frame_end = pos + 4 + total
        # Consume the frame before decoding it: a bad frame must not wedge the stream.
        self._pos = frame_end
        if frame_end == len(buf):
            data = bytes(buf[start:frame_end])
            buf.clear()
            self._pos = 0
        else:
            data = bytes(buf[start:frame_end])
            if self._pos > 65536 and self._pos * 2 > len(buf):
                del buf[: self._pos]
                self._pos = 0
        cmd = decode_command(data[:cmd_size])
        if cmd_size == len(data):
            return Frame(cmd)
        section = memoryview(data)[cmd_size:]
        try:
            return Frame(cmd, decode_payload_section(cmd, section, verify_checksum=self.verify_checksum))
        except PayloadError as exc:
            exc.command = cmd  # lets a broker answer SEND_ERROR for the right producer and sequence
            exc.section = bytes(section)  # lets a consumer quarantine what it could not read
            raise


def split_frame(buf: bytes | bytearray | memoryview) -> int | None:
    """The length of the first whole frame in ``buf`` (size prefix included), None if incomplete.

    Only the 4-byte total size is read: for tools that forward frames untouched (a test
    proxy); decoding is :class:`FrameDecoder`'s job. Raises FrameTooShortError for a total
    size below the minimum.
    """
    if len(buf) < 4:
        return None
    (total,) = U32.unpack_from(buf, 0)
    if total < MIN_FRAME_SIZE - 4:
        raise FrameTooShortError(f"frame total size {total} is below the minimum of 4")
    return 4 + total if len(buf) >= 4 + total else None


def decode_frames(data: bytes, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> list[Frame]:
    """Decode a complete byte string into its frames; raises TruncatedFrameError on leftovers."""
    dec = FrameDecoder(max_message_size)
    dec.feed(data)
    frames = list(dec)
    dec.eof()
    return frames


# ---------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------


def encode_command(cmd: pb.BaseCommand) -> bytes:
    """Frame a simple (payload-free) command."""
    body = cmd.SerializeToString()
    return SIZES.pack(len(body) + 4, len(body)) + body


def encode_payload_section(
    metadata: pb.MessageMetadata | bytes,
    payload: bytes | bytearray | memoryview,
    broker_entry_metadata: pb.BrokerEntryMetadata | bytes | None = None,
    *,
    checksum: bool = True,
) -> bytes:
    """Build ``[broker_entry] [magic checksum] metadata_size metadata payload``.

    ``checksum=False`` leaves out the optional magic and checksum (the layout some brokers
    deliver and Pulsar's clients accept unverified).
    """
    md = metadata if isinstance(metadata, bytes) else metadata.SerializeToString()
    body = U32.pack(len(md)) + md + payload
    head = MAGIC_AND_CHECKSUM.pack(MAGIC_CRC32C, crc32c(body)) if checksum else b""
    if broker_entry_metadata is not None:
        bem = (
            broker_entry_metadata
            if isinstance(broker_entry_metadata, bytes)
            else broker_entry_metadata.SerializeToString()
        )
        head = U16.pack(MAGIC_BROKER_ENTRY_METADATA) + U32.pack(len(bem)) + bem + head
    return head + body


def encode_payload_command(
    cmd: pb.BaseCommand,
    metadata: pb.MessageMetadata | bytes,
    payload: bytes | bytearray | memoryview,
    broker_entry_metadata: pb.BrokerEntryMetadata | bytes | None = None,
    *,
    checksum: bool = True,
) -> bytes:
    """Frame a SEND or MESSAGE command with its metadata and payload (see :func:`encode_payload_section`)."""
    section = encode_payload_section(metadata, payload, broker_entry_metadata, checksum=checksum)
    return encode_with_stored_entry(cmd, section)


def encode_with_stored_entry(cmd: pb.BaseCommand, section: bytes | memoryview) -> bytes:
    """Frame ``cmd`` followed by an already encoded payload section (e.g. an entry from storage)."""
    body = cmd.SerializeToString()
    return SIZES.pack(4 + len(body) + len(section), len(body)) + body + section
