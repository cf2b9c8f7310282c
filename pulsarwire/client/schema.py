"""A topic's schema as the broker stores it: :class:`SchemaInfo` and the Pulsar type names.

``AsyncClient.get_schema`` (GET_SCHEMA) returns a :class:`SchemaInfo`: the type
under Pulsar's own name (``"AVRO"``, ``"JSON"``, ``"STRING"``, ``"INT32"``, ...),
the schema definition bytes (for AVRO and JSON the Avro schema as JSON text; empty
or meaningless for primitives), the properties and the broker's version bytes.
Nothing here decodes values; that is the reader's business.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pulsarwire.proto import pb

#: protocol Schema.Type name -> the name Pulsar's SchemaType uses for it
_PULSAR_NAMES = {
    "None": "NONE",
    "String": "STRING",
    "Json": "JSON",
    "Protobuf": "PROTOBUF",
    "Avro": "AVRO",
    "Bool": "BOOLEAN",
    "Int8": "INT8",
    "Int16": "INT16",
    "Int32": "INT32",
    "Int64": "INT64",
    "Float": "FLOAT",
    "Double": "DOUBLE",
    "Date": "DATE",
    "Time": "TIME",
    "Timestamp": "TIMESTAMP",
    "KeyValue": "KEY_VALUE",
    "Instant": "INSTANT",
    "LocalDate": "LOCAL_DATE",
    "LocalTime": "LOCAL_TIME",
    "LocalDateTime": "LOCAL_DATE_TIME",
    "ProtobufNative": "PROTOBUF_NATIVE",
    "AutoConsume": "AUTO_CONSUME",
}

#: protocol Schema.Type number -> Pulsar's type name
TYPE_NAMES: dict[int, str] = {int(pb.Schema.Type.Value(k)): v for k, v in _PULSAR_NAMES.items()}


@dataclass(frozen=True, slots=True)
class SchemaInfo:
    """One version of a topic's schema.

    ``type`` is Pulsar's type name (``"AVRO"``, ``"JSON"``, ``"STRING"``, ``"INT32"``...),
    ``schema`` the definition bytes, ``version`` the broker's opaque version bytes.
    """

    type: str
    schema: bytes
    properties: dict[str, str] = field(default_factory=dict)
    version: bytes = b""

    @classmethod
    def from_proto(cls, schema: pb.Schema, version: bytes) -> SchemaInfo:
        kind = TYPE_NAMES.get(int(schema.type), f"UNKNOWN({int(schema.type)})")
        props = {kv.key: kv.value for kv in schema.properties}
        return cls(kind, bytes(schema.schema_data), props, bytes(version))
