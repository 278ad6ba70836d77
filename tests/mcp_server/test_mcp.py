"""The MCP server, through the SDK's in-process client: the tools listing, a run call, the
read-only default and writing only below the write root."""

from __future__ import annotations

import json

import anyio
import pytest

pytest.importorskip("mcp")

from mcp import Client

from hwsim.mcp.server import make_server

TOOLS = {"run", "report", "advise", "tune", "fuzz", "sweep"}


def call(server, *requests):
    async def session():
        async with Client(server) as client:
            listing = await client.list_tools()
            answers = [await client.call_tool(name, args) for name, args in requests]
            return listing, answers

    return anyio.run(session)


def payload(answer):
    return answer.structured_content or json.loads(answer.content[0].text)


def test_tools_listing_and_a_run_call():
    listing, (answer,) = call(
        make_server(), ("run", {"workload": "gemm:256x256x512:bf16", "config": "trn2"})
    )
    tools = {t.name: t for t in listing.tools}
    assert set(tools) == TOOLS
    schema = tools["run"].input_schema
    assert (
        schema["required"] == ["workload"] and schema["properties"]["numerics"]["type"] == "boolean"
    )
    assert tools["run"].annotations.read_only_hint is True
    assert not answer.is_error
    summary = payload(answer)
    assert summary["workload"] == "gemm:256x256x512:bf16" and summary["numerics_ok"] is True
    assert summary["total_ns"] > 0 and "tensor" in summary["engines"]


def test_read_only_by_default_and_writes_only_below_the_root(tmp_path):
    _, (refused,) = call(make_server(), ("run", {"workload": "softmax", "out": "r"}))
    assert refused.is_error and "read-only" in refused.content[0].text
    root = tmp_path / "agent"
    server = make_server(root)
    _, (outside, inside, advice) = call(
        server,
        ("run", {"workload": "gemm:128x128x512:bf16", "out": "../escape"}),
        ("run", {"workload": "gemm:128x128x512:bf16", "out": "runs/one", "numerics": False}),
        ("advise", {"target": str(root / "runs" / "one")}),
    )
    assert outside.is_error and "outside the write root" in outside.content[0].text
    assert not (tmp_path / "escape").exists()
    assert not inside.is_error and (root / "runs" / "one" / "summary.json").is_file()
    assert not advice.is_error and payload(advice)["bottleneck"]


def test_bounds_and_errors_come_back_as_tool_errors():
    _, (too_many, bad) = call(
        make_server(), ("fuzz", {"cases": 10**6}), ("run", {"workload": "gemm:0x1x1"})
    )
    assert too_many.is_error and "between 1 and" in too_many.content[0].text
    assert bad.is_error and "hwsim: error:" in bad.content[0].text
