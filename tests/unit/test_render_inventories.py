"""Every shipped inventory (inventories/*/, the lab shapes too), rendered from the inventory alone.

For each host, the roles' own preflight/fact tasks work out what they would write, and the roles'
own templates are rendered into a temporary directory: vLLM's config, fabric settings, environment
file and unit (vllm_service), the nginx upstreams (nginx_lb), the nftables ruleset (firewall) and
Prometheus's configuration (monitoring), and the URLs playbooks/validate.yml and upgrade.yml reach
each head at (their own expressions, read from the playbooks). Every host runs with a local connection: the
inventories' addresses are never contacted. The facts a host would report (systemd, Debian family,
architecture) come from a module in this test's library, as the real hosts would give them.
"""
import importlib.util
import json
import pathlib
import re
import shutil
import sys

import pytest
import yaml

from ansible_run import fixture_inventory, inventory_groups, run_inventory_play, tls_standin  # tests/unit

ROOT = pathlib.Path(__file__).resolve().parents[2]
# A test inventory beside the shipped ones: replicas of different sizes (its hosts.yml says why), with
# inventories/dgx_spark's group_vars and host_vars (copied beside it once per session).
FIXTURES = ROOT / "tests" / "unit" / "fixtures" / "inventories"
MIXED = FIXTURES / "mixed_sizes"
# The expert-parallel layout of inventories/hgx_h200 (DP8+EP instead of TP8), as its comment gives it.
HGX_DP_EP = FIXTURES / "hgx_h200_dp_ep"
INVENTORIES = sorted(p.name for p in (ROOT / "inventories").iterdir()
                     if p.is_dir() and (p / "hosts.yml").exists())

PLAY = """
- name: Render every host's files from the inventory alone
  hosts: all
  gather_facts: false
  vars:
    out: "{{ render_dir }}/{{ inventory_hostname }}"
    templates: "{{ repo_root }}/roles"
  tasks:
    - name: The facts a Debian-family systemd host reports
      inventory_facts:
        facts: >-
          {{ ubuntu_facts | combine({'architecture': 'aarch64' if inventory_hostname in groups['gpu_nodes'] | default([]) else 'x86_64',
                                     'default_ipv4': {'address': ansible_host | default('192.0.2.1')},
                                     'all_ipv4_addresses': [ansible_host | default('192.0.2.1')]}) }}

    - name: Output directory
      ansible.builtin.file:
        path: "{{ out }}"
        state: directory
        mode: "0700"

    - name: vLLM (vllm_service facts and templates)
      when: inventory_hostname in groups['vllm_nodes'] | default([])
      block:
        - name: Facts of vllm_service
          ansible.builtin.include_role:
            name: llmops.vllm_cluster.vllm_service
            tasks_from: facts
            public: true
        - name: Render vllm_service's files
          ansible.builtin.template:
            src: "{{ templates }}/vllm_service/templates/{{ item }}.j2"
            dest: "{{ out }}/{{ item }}"
            mode: "0600"
          loop: [config.yaml, vllm.env, fabric.conf, vllm.service]
        - name: Write what it stages
          ansible.builtin.copy:
            content: "{{ vllm_service__stages | to_json }}"
            dest: "{{ out }}/stages.json"
            mode: "0600"

    - name: The URLs validate.yml and upgrade.yml use for this head (their expressions, given as extra vars)
      when: inventory_hostname in groups['vllm_heads'] | default([])
      ansible.builtin.copy:
        content: "{{ {'validate': [validate_head_url, validate_metrics_url], 'upgrade': [upgrade_head_url]} | to_json }}"
        dest: "{{ out }}/urls.json"
        mode: "0600"
      vars:
        upgrade_head: "{{ inventory_hostname }}"

    - name: nginx (nginx_lb preflight and upstreams)
      when: inventory_hostname in groups['balancers'] | default([])
      block:
        - name: Preflight of nginx_lb
          ansible.builtin.include_role:
            name: llmops.vllm_cluster.nginx_lb
            tasks_from: preflight
            public: true
        - name: Render the upstreams
          ansible.builtin.template:
            src: "{{ templates }}/nginx_lb/templates/vllm-lb.conf.j2"
            dest: "{{ out }}/vllm-lb.conf"
            mode: "0600"

    - name: Firewall (firewall preflight and ruleset)
      when: inventory_hostname in groups['cluster'] | default([])
      block:
        - name: Preflight of firewall
          ansible.builtin.include_role:
            name: llmops.vllm_cluster.firewall
            tasks_from: preflight
            public: true
        - name: Render the ruleset
          ansible.builtin.template:
            src: "{{ templates }}/firewall/templates/ruleset.nft.j2"
            dest: "{{ out }}/ruleset.nft"
            mode: "0600"

    - name: Prometheus (monitoring preflight and configuration)
      when: inventory_hostname in groups['monitoring'] | default([])
      block:
        - name: Preflight of monitoring
          ansible.builtin.include_role:
            name: llmops.vllm_cluster.monitoring
            tasks_from: preflight
            public: true
        - name: Scrape targets of monitoring_prometheus
          ansible.builtin.include_role:
            name: llmops.vllm_cluster.monitoring_prometheus
            tasks_from: targets
            public: true
        - name: Render Prometheus's configuration
          ansible.builtin.template:
            src: "{{ templates }}/monitoring_prometheus/templates/prometheus.yml.j2"
            dest: "{{ out }}/prometheus.yml"
            mode: "0600"
"""

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook not installed")

_RENDERED = {}
_spec = importlib.util.spec_from_file_location("llmops_cluster_filter_r", ROOT / "plugins" / "filter" / "cluster.py")
cluster = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cluster)


def _playbook_urls():
    """The expressions validate.yml and upgrade.yml build each head's URL with, as the playbooks say."""
    validate = yaml.safe_load((ROOT / "playbooks" / "validate.yml").read_text(encoding="utf-8"))
    upgrade = yaml.safe_load((ROOT / "playbooks" / "upgrade.yml").read_text(encoding="utf-8"))
    head_play = next(p for p in validate if "validate_head_url" in (p.get("vars") or {}))
    metrics_play = next(p for p in validate if p.get("name", "").startswith("The vLLM metrics"))
    metrics_task = next(t for t in metrics_play["tasks"][0]["block"] if "llmops.vllm_cluster.vllm_metrics" in t)
    upgrade_play = next(p for p in upgrade if "upgrade_head_url" in (p.get("vars") or {}))
    return {"validate_head_url": head_play["vars"]["validate_head_url"],
            "validate_metrics_url": metrics_task["llmops.vllm_cluster.vllm_metrics"]["base_url"],
            "upgrade_head_url": upgrade_play["vars"]["upgrade_head_url"]}


def _dir(inventory):
    """A shipped inventory by name, or a test inventory of tests/unit/fixtures/inventories/."""
    return fixture_inventory(inventory) if (FIXTURES / inventory).is_dir() else ROOT / "inventories" / inventory


def rendered(inventory, tmp_path_factory, **variables):
    """{host: {file name: text}} for INVENTORY (rendered once per test session and set of VARIABLES,
    extra variables over the inventory's)."""
    key = (inventory, tuple(sorted((k, repr(v)) for k, v in variables.items())))
    if key in _RENDERED:
        return _RENDERED[key]
    work = tmp_path_factory.mktemp("render-" + inventory)
    out = work / "out"
    extra = {"render_dir": str(out), "repo_root": str(ROOT),
             # Every host runs here, with a local connection: no inventory address is contacted.
             "ansible_connection": "local", "ansible_become": False, "ansible_python_interpreter": sys.executable,
             "firewall_gather_facts": False,
             "vault_vllm_api_key": "render-test-engine-key-0001", "vault_edge_api_keys": ["render-test-edge-key-0001"],
             "vault_keepalived_auth_pass": "rt-vrrp1",
             "vault_hf_token": "render-test-hf-token-0001", **_playbook_urls(),
             # The certificate the shipped inventories expect on their balancer: a stand-in for its name.
             **tls_standin(work / "tls", "llm-internal.example.com"), **variables}
    proc = run_inventory_play(_dir(inventory), PLAY, extra, work)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    files = {}
    for host_dir in sorted(out.iterdir()):
        files[host_dir.name] = {p.name: p.read_text(encoding="utf-8") for p in host_dir.iterdir()}
    _RENDERED[key] = files
    return files


def _hosts(inventory):
    return inventory_groups(_dir(inventory))


def _hostvars(inventory):
    """Each host's variables as hosts.yml gives them (merged over every group it appears in)."""
    data = yaml.safe_load((_dir(inventory) / "hosts.yml").read_text(encoding="utf-8"))
    out = {}

    def walk(node):
        node = node or {}
        for name, hv in (node.get("hosts") or {}).items():
            out.setdefault(name, {}).update(hv or {})
        for sub in (node.get("children") or {}).values():
            walk(sub)

    walk(data["all"])
    return out


def _management(inventory, host):
    return str(_hostvars(inventory)[host].get("ansible_host", host))


def _fabric(inventory, host):
    path = _dir(inventory) / "host_vars" / f"{host}.yml"
    hv = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else {}
    return [i for i in (hv or {}).get("network_interfaces", []) if i.get("role") == "fabric" and i.get("addresses")]


def _fabric_address(inventory, host):
    """The node's fabric address: vllm_service_advertise_address, else its first fabric interface's."""
    advertise = _hostvars(inventory)[host].get("vllm_service_advertise_address")
    if advertise:
        return str(advertise)
    fabric = _fabric(inventory, host)
    return fabric[0]["addresses"][0].split("/")[0] if fabric else None


def _replica(config_text):
    """The replica named in the rendered config's header comment."""
    match = re.search(r"^# vLLM serve configuration for replica (\S+), node", config_text, re.M)
    assert match, config_text[:400]
    return match.group(1)


def _env(text):
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_every_host_renders(inventory, tmp_path_factory):
    files = rendered(inventory, tmp_path_factory)
    groups = _hosts(inventory)
    for host in groups["vllm_nodes"]:
        assert {"config.yaml", "vllm.env", "fabric.conf", "vllm.service"} <= set(files[host]), host
        yaml.safe_load(files[host]["config.yaml"])
    for host in groups["balancers"]:
        assert "upstream" in files[host]["vllm-lb.conf"]
    for host in groups["cluster"]:
        assert "table inet" in files[host]["ruleset.nft"]
    for host in groups["monitoring"]:
        assert yaml.safe_load(files[host]["prometheus.yml"])["scrape_configs"]


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_replicas_rendezvous_on_the_heads_fabric_address_with_every_hca(inventory, tmp_path_factory):
    files = rendered(inventory, tmp_path_factory)
    groups = _hosts(inventory)
    replica_of = {h: _replica(files[h]["config.yaml"]) for h in groups["vllm_nodes"]}
    head_of = {replica_of[h]: h for h in groups.get("vllm_heads", [])}
    for host in groups["vllm_nodes"]:
        cfg = yaml.safe_load(files[host]["config.yaml"])
        fabric = _fabric(inventory, host)
        env = _env(files[host]["vllm.env"])
        conf = _env(files[host]["fabric.conf"])
        if fabric:
            own = fabric[0]["addresses"][0].split("/")[0]
            assert env["VLLM_HOST_IP"] == own, host
            assert conf["SOCKET_IFNAME"] == fabric[0]["name"], host
            # every fabric interface's RoCE device (where its name gives one), or the inventory's own list
            hcas = [h for h in conf["IB_HCA"].strip("'").split(",") if h]
            derived = [cluster.cluster_rdma_device(i["name"]) for i in fabric]
            assert hcas, (host, conf)
            assert hcas == derived or not all(derived) or set(hcas) - set(derived), (host, hcas, derived)
            assert conf["IB_GID_INDEX"] in ("''", ""), "NCCL picks the GID unless the user sets it"
        if _fabric_address(inventory, host):
            assert env["VLLM_HOST_IP"] == _fabric_address(inventory, host), host
        if cfg.get("nnodes", 1) > 1:
            head = head_of[replica_of[host]]
            assert cfg["master-addr"] == _fabric_address(inventory, head), (host, cfg["master-addr"])
            assert cfg["master-addr"] != _management(inventory, head), "the rendezvous must not cross the management link"
            assert not cfg["master-addr"].startswith("10.0.0."), "the rendezvous must not cross the management link"


def test_dgx_spark_two_tp2_replicas_on_the_fabric(tmp_path_factory):
    files = rendered("dgx_spark", tmp_path_factory)
    for host, rank, master in (("dgx1", 0, "192.168.100.11"), ("dgx2", 1, "192.168.100.11"),
                               ("dgx3", 0, "192.168.100.13"), ("dgx4", 1, "192.168.100.13")):
        cfg = yaml.safe_load(files[host]["config.yaml"])
        assert (cfg["nnodes"], cfg["node-rank"], cfg["master-addr"], cfg["master-port"]) == (2, rank, master, 29501)
        assert cfg.get("headless", False) is (rank == 1)
        conf = _env(files[host]["fabric.conf"])
        assert conf["IB_HCA"] == "rocep1s0f1,roceP2p1s0f1" and conf["SOCKET_IFNAME"] == "enp1s0f1np1"
    env = _env(files["dgx2"]["vllm.env"])
    assert env["VLLM_HOST_IP"] == "192.168.100.12" and "VLLM_API_KEY" not in env


def test_dgx_spark_deepseek_v4_model_profile(tmp_path_factory):
    files = rendered("dgx_spark", tmp_path_factory)
    for host in ("dgx1", "dgx3"):
        cfg = yaml.safe_load(files[host]["config.yaml"])
        assert cfg["tokenizer-mode"] == "deepseek_v4"
        assert cfg["reasoning-parser"] == "deepseek_v4" and cfg["tool-call-parser"] == "deepseek_v4"
        assert cfg["enable-auto-tool-choice"] is True and cfg["trust-remote-code"] is True
        assert cfg["speculative-config"]["method"] == "dspark"
        assert cfg["speculative-config"]["num_speculative_tokens"] >= 5
        assert cfg["kv-cache-dtype"] == "fp8_ds_mla" and cfg["block-size"] == 256
        assert cfg["tensor-parallel-size"] == 2
        # GB10 cannot trim verification requests on device (DeepSeek-V4's indexer backend).
        assert cfg["speculative-config"]["enable_adaptive_verification"] is False
        assert cfg["default-chat-template-kwargs"] == {"reasoning_effort": "low"}
        assert cfg["async-scheduling"] is True and cfg["max-cudagraph-capture-size"] == 48
        env = _env(files[host]["vllm.env"])
        assert json.loads(env["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"]) == "1800"
        assert json.loads(env["PYTORCH_CUDA_ALLOC_CONF"]) == "expandable_segments:True"
        # The engine cores are waited for as long as the role waits (no checkpoint here: the floor).
        assert env["VLLM_ENGINE_READY_TIMEOUT_S"] == "600"


@pytest.mark.parametrize("inventory, layout", [
    ("hgx_h200", {"tensor-parallel-size": 8, "data-parallel-size": None, "enable-expert-parallel": None}),
    (HGX_DP_EP.name, {"tensor-parallel-size": 1, "data-parallel-size": 8, "enable-expert-parallel": True}),
])
def test_hgx_h200_layouts_tp8_and_dp8_ep(inventory, layout, tmp_path_factory):
    files = rendered(inventory, tmp_path_factory)
    for host in ("h200-1", "h200-2"):
        cfg = yaml.safe_load(files[host]["config.yaml"])
        assert {k: cfg.get(k) for k in layout} == layout, cfg
        assert cfg["speculative-config"]["enable_adaptive_verification"] is True  # Hopper with DeepGEMM
        assert cfg["default-chat-template-kwargs"] == {"reasoning_effort": "low"}
        assert "nnodes" not in cfg


def test_dgx_spark_single_stages_the_draft_model(tmp_path_factory):
    files = rendered("dgx_spark_single", tmp_path_factory)
    for host in ("dgx1", "dgx2", "dgx3", "dgx4"):
        cfg = yaml.safe_load(files[host]["config.yaml"])
        stages = json.loads(files[host]["stages.json"])
        draft = cfg["speculative-config"]["model"]
        assert {s["what"]: s["dest"] for s in stages} == {"model": cfg["model"], "draft": draft}, stages
        assert [s["stage"]["method"] for s in stages] == ["path", "path"]
        assert _env(files[host]["fabric.conf"])["IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"
        assert "nnodes" not in cfg and "master-addr" not in cfg


def test_nginx_and_prometheus_see_the_heads_only(tmp_path_factory):
    for inventory in INVENTORIES:
        files = rendered(inventory, tmp_path_factory)
        groups = _hosts(inventory)
        for lb in groups["balancers"]:
            conf = files[lb]["vllm-lb.conf"]
            upstream = re.findall(r"^\s*server\s+([0-9][^\s;]*)", conf, re.M)
            mgmt = {h: _management(inventory, h) for h in groups["vllm_nodes"]}
            assert sorted(upstream) == sorted(f"{mgmt[h]}:8000" for h in groups["vllm_heads"]), upstream
        for mon in groups["monitoring"]:
            prom = files[mon]["prometheus.yml"]
            assert "render-test" not in prom  # no key in Prometheus's configuration
            for head in groups["vllm_heads"]:
                assert f"{head}:8000" in prom or f"{_management(inventory, head)}:8000" in prom, prom
            for worker in groups.get("vllm_workers", []):
                assert f"{worker}:8000" not in prom and f"{_management(inventory, worker)}:8000" not in prom


def _address_of(target):
    """The host part of HOST:PORT, [V6]:PORT or scheme://HOST:PORT/..."""
    target = re.sub(r"^[a-z]+://", "", target).split("/", 1)[0]
    if target.startswith("["):
        return target[1:].split("]", 1)[0]
    return target.rsplit(":", 1)[0] if ":" in target else target


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_no_inventory_name_where_an_address_belongs(inventory, tmp_path_factory):
    """Hosts need not resolve each other's names: upstream servers, scrape targets and the playbooks'
    URLs carry addresses from the inventory (ansible_host), never an inventory name."""
    import ipaddress
    files = rendered(inventory, tmp_path_factory)
    groups = _hosts(inventory)
    names = set(groups["all"])
    found = []
    for lb in groups["balancers"]:
        found += [("nginx upstream on " + lb, t)
                  for t in re.findall(r"^\s*server\s+([^\s;{]+)[^;{\n]*;", files[lb]["vllm-lb.conf"], re.M)]
    for mon in groups["monitoring"]:
        for job in yaml.safe_load(files[mon]["prometheus.yml"])["scrape_configs"]:
            for sc in job.get("static_configs", []):
                found += [("scrape target of %s on %s" % (job["job_name"], mon), t) for t in sc["targets"]]
    for head in groups["vllm_heads"]:
        urls = json.loads(files[head]["urls.json"])
        found += [("validate.yml URL of " + head, u) for u in urls["validate"]]
        found += [("upgrade.yml URL of " + head, u) for u in urls["upgrade"]]
    assert len(found) >= len(groups["balancers"]) + 3 * len(groups["vllm_heads"]), found
    bad = []
    for where, target in found:
        address = _address_of(target)
        if address in names:
            bad.append("%s: %s (an inventory name)" % (where, target))
            continue
        try:
            ipaddress.ip_address(address)
        except ValueError:
            bad.append("%s: %s (not an address)" % (where, target))
    assert not bad, "\n".join(bad)


def test_replicas_of_different_sizes_render_each_at_its_own_size(tmp_path_factory):
    """r1 is tensor parallel 2 across dgx1 + dgx2, r2 is dgx3 alone: each replica's nodes get their
    own replica's rendezvous (none for r2), the balancer and Prometheus reach both heads, and only
    r1's nodes open the engine's peer ports to each other."""
    files = rendered(MIXED.name, tmp_path_factory)
    r1_head, r1_worker, r2 = (yaml.safe_load(files[h]["config.yaml"]) for h in ("dgx1", "dgx2", "dgx3"))
    assert (r1_head["nnodes"], r1_head["node-rank"], r1_head["tensor-parallel-size"]) == (2, 0, 2)
    assert (r1_worker["nnodes"], r1_worker["node-rank"], r1_worker["headless"]) == (2, 1, True)
    assert r1_head["master-addr"] == r1_worker["master-addr"] == _fabric_address(MIXED.name, "dgx1")
    assert "nnodes" not in r2 and "master-addr" not in r2 and not r2.get("headless", False), r2
    assert r2.get("tensor-parallel-size", 1) == 1, r2
    upstream = re.findall(r"^\s*server\s+([0-9][^\s;]*)", files["lb1"]["vllm-lb.conf"], re.M)
    assert sorted(upstream) == ["10.0.0.1:8000", "10.0.0.3:8000"], upstream
    prom = files["lb1"]["prometheus.yml"]
    assert "10.0.0.1:8000" in prom and "10.0.0.3:8000" in prom and "10.0.0.2:8000" not in prom
    r1_peer = _fabric_address(MIXED.name, "dgx2")
    assert r1_peer in files["dgx1"]["ruleset.nft"], "r1's head must let its worker reach the rendezvous"
    assert r1_peer not in files["dgx3"]["ruleset.nft"], "r2 has no peer: r1's worker must not reach dgx3's engine ports"


@pytest.mark.parametrize("routing", ["cache_aware", "session"])
def test_routed_balancers_send_the_openai_routes_to_the_router_with_the_heads_as_fallback(routing, tmp_path_factory):
    """nginx_lb_routing cache_aware or session: the router's routes go to 127.0.0.1:30000 with every head
    as a backup (the same replica markers, so nginx-lb-drain drains both upstreams), every other path to
    the heads as before, and each request carries nginx's own request id."""
    files = rendered("dgx_spark", tmp_path_factory, nginx_lb_routing=routing)
    groups = _hosts("dgx_spark")
    mgmt = {h: _management("dgx_spark", h) for h in groups["vllm_heads"]}
    for lb in groups["balancers"]:
        conf = files[lb]["vllm-lb.conf"]
        router = re.search(r"^upstream vllm_replicas_router \{(.*?)^\}", conf, re.M | re.S)
        assert router, conf
        body = router.group(1)
        assert re.search(r"^\s*server 127\.0\.0\.1:30000 max_fails=1 fail_timeout=2s;  # llmops-router$", body, re.M), body
        backups = re.findall(r"^\s*server (\S+) .* backup;  # llmops-replica=(\S+)$", body, re.M)
        assert sorted(address for address, _name in backups) == sorted(f"{ip}:8000" for ip in mgmt.values()), body
        heads = re.search(r"^upstream vllm_replicas \{(.*?)^\}", conf, re.M | re.S).group(1)
        assert sorted(re.findall(r"# llmops-replica=(\S+)$", heads, re.M)) == sorted(name for _address, name in backups)
        assert re.search(r'"~\^/v1/\(chat/completions\|completions\|responses\|embeddings\|rerank\|models\)\$" '
                         r"vllm_replicas_router;", conf), conf
        assert "default vllm_replicas;" in conf
        assert "proxy_pass http://$llmops_vllm_upstream$uri$is_args$args;" in conf
        assert "proxy_set_header X-Request-ID $request_id;" in conf
        # keepalived's check still asks the heads themselves
        assert "proxy_pass http://vllm_replicas/health;" in conf
    # cache_aware needs the heads' render endpoints (vLLM answers them 403 without --enable-scale-out);
    # session does not ask for token ids. Workers serve no HTTP.
    for node in groups["vllm_nodes"]:
        config = yaml.safe_load(files[node]["config.yaml"])
        wanted = routing == "cache_aware" and node in groups["vllm_heads"]
        assert config.get("enable-scale-out", False) is wanted, (node, routing)


def test_least_conn_renders_no_router(tmp_path_factory):
    files = rendered("dgx_spark", tmp_path_factory)
    for node in _hosts("dgx_spark")["vllm_nodes"]:
        assert "enable-scale-out" not in yaml.safe_load(files[node]["config.yaml"]), node
    for lb in _hosts("dgx_spark")["balancers"]:
        conf = files[lb]["vllm-lb.conf"]
        assert "_router" not in conf and "127.0.0.1:30000" not in conf and "X-Request-ID" not in conf
        assert "proxy_pass http://vllm_replicas$uri$is_args$args;" in conf
