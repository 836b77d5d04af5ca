"""A scripted stand-in for a coding agent, for `atrex-mcp bench run --agent "CMD …"`.

It plays what an agent does through the MCP server, with no model: list_problems →
get_problem → (take a known-good kernel) → write kernel.py → validate on the smoke shape →
package. It logs validate's output-contract verdict (rule, line, fix of each violation) and
still calls package, whose refusal the server records, so the run reports the contract
failure. The kernel comes from a folder of known-good kernels (`--kernels DIR`, files named
`<op>.py` or `<op>_triton.py`), or, when the condition allows the wiki tools, from the wiki's
validated kernels (wiki_search + wiki_read). CI uses it to run operators end to end on CPU;
it is also the smallest example of the generic agent contract (environment variables listed
in atrex_mcp.agentbench.agents.CommandDriver).

    atrex-mcp bench run --agent "python3 examples/bench_scripted_agent.py --kernels gpu_wiki/kernels" \
        --ops rms_norm,silu_and_mul,l2_norm --out runs/scripted
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client


class Refused(Exception):
    """The script cannot go on (a tool error, a disallowed tool, no known kernel)."""


def connect() -> Client:
    """A client for the server named in the environment (stdio command, or URL + token)."""
    if os.environ["ATREX_MCP_TRANSPORT"] == "stdio":
        argv = json.loads(os.environ["ATREX_MCP_COMMAND"])
        env = {**json.loads(os.environ.get("ATREX_MCP_ENV") or "{}"), "HOME": os.environ["HOME"]}
        return Client(StdioServerParameters(command=argv[0], args=argv[1:], env=env))
    headers = {"Authorization": f"Bearer {os.environ['ATREX_MCP_TOKEN']}"}
    return Client(
        streamable_http_client(
            os.environ["ATREX_MCP_URL"], http_client=httpx2.AsyncClient(headers=headers, timeout=None)
        )
    )


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    allowed = os.environ.get("ATREX_ALLOWED_TOOLS", "").split(",")
    if tool not in allowed:
        raise Refused(f"{tool} is not allowed in this condition (allowed: {', '.join(allowed)})")
    result = await client.call_tool(tool, arguments)
    if result.is_error:
        raise Refused(f"{tool} failed: " + " ".join(getattr(c, "text", "") for c in result.content))
    return result.structured_content or {}


def kernel_file(op: str, kernels: Path) -> Path | None:
    return next((kernels / n for n in (f"{op}.py", f"{op}_triton.py") if (kernels / n).is_file()), None)


async def known_kernel(client: Client, op: str, kernels: Path | None) -> str:
    if kernels is not None:
        path = kernel_file(op, kernels)
        if path is None:
            raise Refused(f"no known kernel for {op} in {kernels}")
        print(f"kernel: {path}", flush=True)
        return path.read_text()
    hits = (await call(client, "wiki_search", {"query": f"{op} kernel", "category": "kernels", "limit": 10}))["hits"]
    doc_id = next((h["doc_id"] for h in hits if h["doc_id"] == f"kernels/{op}"), None)
    if doc_id is None:
        raise Refused(f"the wiki has no validated kernel for {op}")
    print(f"wiki_search: found {doc_id}", flush=True)
    return (await call(client, "wiki_read", {"doc_id": doc_id, "max_chars": 40000}))["doc"]["text"]


async def solve(op: str, workspace: Path, kernels: Path | None) -> str | None:
    """Play the steps; the reason it stopped early, or None when the kernel is packaged."""
    if kernels is not None and kernel_file(op, kernels) is None:
        return f"no known kernel for {op} in {kernels}"  # nothing to do: do not even start the server
    async with connect() as client:
        try:
            names = [p["name"] for p in (await call(client, "list_problems", {}))["problems"]]
            print(f"list_problems: {len(names)} problems", flush=True)
            if op not in names:
                raise Refused(f"{op} is not served")
            problem = await call(client, "get_problem", {"op": op})
            print(f"get_problem: {op}, {len(problem['shapes'])} shapes", flush=True)
            (workspace / "kernel.py").write_text(await known_kernel(client, op, kernels))
            verdict = await call(client, "validate", {"op": op, "path": "kernel.py", "shapes": ["smoke"], "seeds": 1})
            print(
                f"validate: {verdict['passed']} passed, {verdict['failed']} failed on {verdict['device']}", flush=True
            )
            contract = verdict.get("contract") or {"passed": True, "violations": []}
            print(f"contract: {'passed' if contract['passed'] else 'refused'}", flush=True)
            for v in contract["violations"]:
                print(f"contract: {v['rule']} (line {v['line']}): {v['message']} — fix: {v['fix']}", flush=True)
            if verdict["failed"] or not verdict["compiled"]:
                raise Refused("the kernel did not validate; not packaging it")
            packaged = await call(client, "package", {"op": op, "path": "kernel.py"})
            print(f"package: {packaged['artifact']}", flush=True)
        except Refused as exc:
            return str(exc)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernels", type=Path, help="folder of known-good kernels (<op>.py or <op>_triton.py)")
    args = parser.parse_args()
    stopped = anyio.run(solve, os.environ["ATREX_OP"], Path(os.environ["ATREX_WORKSPACE"]), args.kernels)
    if stopped:
        print(f"stopped: {stopped}", flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
