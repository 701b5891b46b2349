"""Stand-in client on the balancer of the vllm_router scenario (the router listens on loopback only, so
its requests start on the balancer, as nginx's will): sends the requests of a JSON spec on stdin to the
router and prints, as JSON, which stand-in head answered each one.

    {"url": "http://127.0.0.1:30000", "concurrency": 4,
     "requests": [{"path": "/v1/chat/completions", "body": {...}, "headers": {...}}, ...]}
    -> [{"backend": NAME or null, "status": HTTP status or 0, "error": text}, ...] in the requests' order
"""
import json
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor


def send(url, item):
    headers = dict({"Content-Type": "application/json"}, **(item.get("headers") or {}))
    request = urllib.request.Request(url.rstrip("/") + item.get("path", "/v1/chat/completions"),
                                     json.dumps(item.get("body") or {}).encode(), headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return {"backend": json.loads(response.read()).get("backend"), "status": response.status, "error": ""}
    except urllib.error.HTTPError as error:
        return {"backend": None, "status": error.code, "error": error.read().decode("utf-8", "replace")[:300]}
    except (OSError, ValueError) as error:
        return {"backend": None, "status": 0, "error": str(error)}


def main():
    spec = json.load(sys.stdin)
    with ThreadPoolExecutor(max_workers=max(1, int(spec.get("concurrency", 1)))) as pool:
        results = list(pool.map(lambda item: send(spec["url"], item), spec["requests"]))
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
