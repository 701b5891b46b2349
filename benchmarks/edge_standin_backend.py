"""Stand-in SSE backend for benchmarks/edge_load_bench.py (not vLLM): fixed token pacing, so that the
balancer in front of it is what is measured.

asyncio on raw streams, HTTP/1.1 with keep-alive (nginx reuses its upstream connections). Every
POST answers a server-sent-event stream in chunked encoding: the first token after --ttft seconds,
then --tokens tokens --gap seconds apart (token i is due at start + ttft + i * gap, whatever the
previous write cost), then `data: [DONE]`. The number of tokens and the gap can be set per request
with the headers X-Tokens and X-Gap-Ms (the bench sets them the same through the balancer and
directly). GET /stats answers the streams open now and the most open at once (GET /stats/reset starts that
count again).

  python3 edge_standin_backend.py --port 8000
"""
import argparse
import asyncio
import json
import resource
import time

STATE = {"open": 0, "max_open": 0, "served": 0}


def chunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


async def stream(writer, tokens, gap, ttft):
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
    loop = asyncio.get_running_loop()
    start = loop.time()
    STATE["open"] += 1
    STATE["max_open"] = max(STATE["max_open"], STATE["open"])
    try:
        for i in range(tokens):
            delay = start + ttft + i * gap - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            event = b'data: {"choices":[{"index":0,"text":" t%d"}]}\n\n' % i
            writer.write(chunk(event))
            await writer.drain()
        writer.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        STATE["served"] += 1
    finally:
        STATE["open"] -= 1


async def handle(reader, writer, args):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method = lines[0].split(" ", 1)[0]
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    name, value = line.split(":", 1)
                    headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0") or 0)
            if length:
                await reader.readexactly(length)
            if method == "POST":
                tokens = min(int(headers.get("x-tokens", args.tokens)), 1000)
                gap = min(int(headers.get("x-gap-ms", int(args.gap * 1000))), 10000) / 1000.0
                await stream(writer, tokens, gap, args.ttft)
            else:
                if lines[0].split(" ")[1:2] == ["/stats/reset"]:
                    STATE["max_open"] = STATE["open"]
                body = json.dumps(dict(STATE, at=time.time())).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(body), body))
                await writer.drain()
            if headers.get("connection", "").lower() == "close":
                break
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, ValueError):
        pass
    finally:
        writer.close()


async def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--gap", type=float, default=0.5)
    parser.add_argument("--ttft", type=float, default=0.05)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    server = await asyncio.start_server(lambda r, w: handle(r, w, args), args.host, args.port, backlog=4096)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
