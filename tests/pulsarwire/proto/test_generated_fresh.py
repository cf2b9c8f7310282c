"""The committed pulsar_api_pb2 module must be what `make proto` makes from pulsar_api.proto."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from google.protobuf import descriptor_pb2

from pulsarwire.proto import pb

PROTO_DIR = Path(__file__).resolve().parents[3] / "pulsarwire" / "proto"
MYPY_PLUGIN = Path(sys.executable).parent / "protoc-gen-mypy"


def _protoc(*args: str) -> None:
    proto = str(PROTO_DIR / "pulsar_api.proto")
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_DIR}",
        f"--plugin=protoc-gen-mypy={MYPY_PLUGIN}",
    ]
    subprocess.run([*cmd, *args, proto], check=True)


def _strip_json_names(file: descriptor_pb2.FileDescriptorProto) -> None:
    # protoc's python_out embeds the descriptor without json_name.
    def strip(msg: descriptor_pb2.DescriptorProto) -> None:
        for field in msg.field:
            field.ClearField("json_name")
        for nested in msg.nested_type:
            strip(nested)

    for msg in file.message_type:
        strip(msg)


def test_committed_module_matches_proto(tmp_path: Path) -> None:
    desc_file = tmp_path / "api.desc"
    _protoc(f"--descriptor_set_out={desc_file}", f"--python_out={tmp_path}", f"--mypy_out={tmp_path}")
    fresh = descriptor_pb2.FileDescriptorSet.FromString(desc_file.read_bytes()).file[0]
    _strip_json_names(fresh)
    committed = descriptor_pb2.FileDescriptorProto.FromString(pb.DESCRIPTOR.serialized_pb)
    assert committed == fresh, "pulsar_api_pb2.py is stale: run `make proto` and commit the result"
    stubs = (tmp_path / "pulsar_api_pb2.pyi").read_text()
    assert stubs == (PROTO_DIR / "pulsar_api_pb2.pyi").read_text(), "stale .pyi: run `make proto`"


def test_command_types_match_sub_message_fields() -> None:
    # Every BaseCommand.Type value N names the sub-command in field number N: a wire fact we rely on.
    fields = {f.number for f in pb.BaseCommand.DESCRIPTOR.fields if f.name != "type"}
    assert fields == set(pb.BaseCommand.Type.values())
    assert max(pb.ProtocolVersion.values()) == 21
