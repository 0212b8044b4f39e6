"""Area B: the shadow canary (lambda_proxy/shadow.py, service.mirror/_mirrored/settle,
lambda_proxy/registry.py, contracts/quality.py)."""

from __future__ import annotations

import contextlib
import random

from _common import *  # noqa: F403
from _shadow import *  # noqa: F403
from _shadow import CANARY, GROUP, NOTE_TEXT, STABLE  # noqa: F401

from botocore.exceptions import ReadTimeoutError
from contracts.quality import SIGNALS, measure
from contracts.routing import CanaryRoute

# -- forcing, seeing, steering a mirror -------------------------------------------------------


@case("S01", "a caller cannot force a mirror: headers x-shadow, x-mirror, x-session-key, "
      "x-canary, OpenAI user, with the draw above the share", "no mirror")
def _():
    cfg = canary_cfg(shadow=0.1)
    m = Models()
    fake = configure(m, cfg)
    hdrs = {"X-Shadow": "1", "X-Mirror": "true", "X-Session-Key": "canary", "X-Canary": "2",
            "X-Amzn-SageMaker-Inference-Component": CANARY}
    with mirror_share(0.5):
        gen("m", {"inputs": "x"}, headers=hdrs)
        chat({"model": "m", "user": "canary", "messages": [{"role": "user", "content": "x"}]},
             headers=hdrs)
        service.deps().mirrors.wait()
    return ok(fake.components()[CANARY] == 0, dict(fake.components()))


@case("S02", "the caller never sees the canary's answer (body, headers, version, fingerprint)",
      "stable's answer only")
def _():
    cfg = canary_cfg()
    m = Models(canary=lambda t, n, p: "CANARY-ANSWER")
    configure(m, cfg)
    with mirror_share(0.0):
        st, body, hdrs = gen("m", {"inputs": "x"})
        st2, body2, hdrs2 = chat({"model": "m", "temperature": 0,
                                   "messages": [{"role": "user", "content": "y"}]})
        service.deps().mirrors.wait()
    blob = json.dumps([body, hdrs, body2, hdrs2])
    return ok("CANARY" not in blob and '"2"' not in blob and body["version"] == "1",
              f"{body['output']!r} v{body['version']}; chat fp {body2['system_fingerprint']}")


@case("S03", "the canary's answer never enters the cache (a later hit is stable's)",
      "cache holds stable's only")
def _():
    cfg = canary_cfg()
    m = Models(canary=lambda t, n, p: "CANARY-ANSWER")
    configure(m, cfg)
    with mirror_share(0.0):
        ask("q1")
        st, body = ask("q1")
    vals = [R.get(k) for k in R.keys("lora:cache*")] + [R.get(k) for k in R.keys("*") if
                                                          R.type(k) == b"string"]
    leaked = [v for v in vals if v and b"CANARY-ANSWER" in v]
    return ok(body["cache"] == "hit" and body["output"] != "CANARY-ANSWER" and not leaked,
              f"second answer {body['output']!r} ({body['cache']}); Redis values with the canary's "
              f"answer: {len(leaked)}")


@case("S04", "under concurrency each mirror runs its own caller's payload (two tenants "
      "interleaved, 40 requests, 8 threads)", "mirror payload == the caller's payload")
def _():
    cfg = canary_cfg()
    m = Models()
    configure(m, cfg)
    service.deps().mirrors = shadow.Mirrors(64)
    errors = []

    def one(i):
        who = role("clinic-north") if i % 2 else role("clinic-south")
        st, body, _ = gen("m", {"inputs": f"req-{i}-{'N' if i % 2 else 'S'}"}, arn=who)
        if st != 200:
            errors.append(st)
    with mirror_share(0.0):
        ts = [threading.Thread(target=one, args=(i,)) for i in range(40)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        service.deps().mirrors.wait(30)
    stable_in = sorted(p["inputs"] for c, p, _ in m.seen if c == STABLE)
    canary_in = sorted(p["inputs"] for c, p, _ in m.seen if c == CANARY)
    return ok(stable_in == canary_in and not errors, f"{len(canary_in)} mirrors, payload sets "
              f"equal: {stable_in == canary_in}, errors {errors}")


@case("S05", "a mirror's fair-queue key is the shadow sender, never its caller's",
      "CustomAttributes fair-key=sha(shadow-mirror)")
def _():
    from contracts.fairness import custom_attributes
    cfg = canary_cfg()
    m = Models()
    configure(m, cfg)
    with mirror_share(0.0):
        ask("x")
    keys = {c: a for c, p, a in m.seen}
    return ok(keys[CANARY] == custom_attributes(service.SHADOW_SENDER) and keys[STABLE] !=
              keys[CANARY], keys)


@case("S06", "streamed requests are not mirrored (native and OpenAI)", "no canary call")
def _():
    cfg = canary_cfg()
    m = Models()
    fake = configure(m, cfg)
    with mirror_share(0.0):
        web_post("/v1/adapters/m/generate", {"inputs": "x", "stream": True})
        web_post("/v1/chat/completions", {"model": "m", "stream": True,
                                           "messages": [{"role": "user", "content": "x"}]})
        service.deps().mirrors.wait()
    return ok(not any(c == CANARY for c, _, _ in m.seen), [c for c, _, _ in m.seen])


@case("S07", "a hung canary: 200 requests with MAX_IN_FLIGHT=2 mirrors", "2 in flight, the rest "
      "dropped, callers never wait")
def _():
    cfg = canary_cfg()
    gate = threading.Event()

    def hung(t, n, p):
        gate.wait(20)
        return words(f"Patient note: {t}", n)
    m = Models(canary=hung)
    configure(m, cfg)
    service.deps().mirrors = shadow.Mirrors(2)
    t0 = time.perf_counter()
    with mirror_share(0.0):
        for i in range(200):
            gen("m", {"inputs": f"x{i}"})
        dt = time.perf_counter() - t0
        inflight = sum(1 for c, _, _ in m.seen if c == CANARY)
        gate.set()
        service.deps().mirrors.wait(30)
    return ok(inflight == 2 and dt < 10, f"canary calls in flight {inflight}, 200 callers "
              f"answered in {dt:.2f}s")


@case("S08", "a stable answer from the cache is mirrored too (stable does no work, the canary "
      "generates)", "a replayed cached request is either not mirrored or one pair per input")
def _():
    cfg = canary_cfg()
    m = Models()
    fake = configure(m, cfg)
    with mirror_share(0.0):
        for _ in range(10):
            st, body = ask("same prompt")
    comps = fake.components()
    return "NOTE", (f"10 identical requests: stable invoked {comps[STABLE]}x (9 cache hits), "
                    f"canary {comps[CANARY]}x; pairs n={pairs(cfg).get('n')}")


# -- poisoning the paired test ----------------------------------------------------------------


@case("S09", "one tenant replays ONE input the canary answers worse; 2 other tenants send 1 "
      "request each (min_callers 3)", "one tenant's inputs decide nothing for everyone "
      "(docs/shadow-canary.md); a replayed input is one piece of evidence")
def _():
    cfg = canary_cfg(min_callers=3, min_pairs=30)
    bad_input = "Summarise: the device reported status OK."

    def canary(t, n, p):
        return loop_answer(t, n, p) if t == bad_input else words(f"Patient note: {t}", n)
    m = Models(canary=canary)
    fake = configure(m, cfg)
    with mirror_share(0.0):
        ask("hello from south", arn=role("clinic-south"))
        ask("hello from east", arn=role("clinic-east"))
        for _ in range(40):
            ask(bad_input, arn=role("clinic-north"))
            if switch(cfg, "off"):
                break
    ev = json.loads(switch(cfg, "off") or "{}")
    comps = fake.components()
    return ok(not ev, f"rolled back: {bool(ev)}; reason {ev.get('reason')!r}; stable invoked "
              f"{comps[STABLE]}x for {comps[CANARY]} mirrors (the replays were cache hits)")


@case("S10", "min_callers is met by 1 pair from each other caller; the decision rests on 28 "
      "pairs from one (the same as S09, counted)", "a share cap per caller")
def _():
    cfg = canary_cfg(min_callers=3, min_pairs=30)
    bad = "status OK"

    def canary(t, n, p):
        return loop_answer(t, n, p) if "status OK" in t else words(f"Patient note: {t}", n)
    configure(Models(canary=canary), cfg)
    callers = collections.Counter()
    with mirror_share(0.0):
        for who, k in (("clinic-south", 1), ("clinic-east", 1), ("clinic-north", 40)):
            for i in range(k):
                if switch(cfg, "off"):
                    break
                ask(f"{bad} {i}" if who == "clinic-north" else "hi", arn=role(who))
                callers[who] += 1
    ev = json.loads(switch(cfg, "off") or "{}")
    return ok(not ev, f"pairs by caller {dict(callers)}; decision {ev.get('action')} at n="
              f"{ev.get('n')} from {ev.get('callers')} callers")


@case("S11", "min_callers met by one partner account admitted as ACCOUNT:* using two of its "
      "own roles (no other caller at all)", "two roles of one account are not two independent "
      "callers, or min_callers counts accounts")
def _():
    cfg = canary_cfg(min_callers=2, min_pairs=30)
    m = Models(canary=lambda t, n, p: "")
    configure(m, cfg, tenants=[f"{OTHER_ACCT}:*"])
    with mirror_share(0.0):
        for i in range(30):
            who = role("probe-a" if i % 2 else "probe-b", acct=OTHER_ACCT)
            ask(f"q{i}", arn=who)
    ev = json.loads(switch(cfg, "off") or "{}")
    return ok(not ev, f"decision {ev.get('action')} at n={ev.get('n')} from {ev.get('callers')} "
              "'callers' = 2 roles of account 999999999999")


@case("S12", "promote a broken canary: one tenant floods max_new_tokens=1 requests (both "
      "versions answer the same first word); 2 honest callers' pairs show it loops",
      "a canary that loops on every real request is not promoted")
def _():
    cfg = canary_cfg(min_callers=3, min_pairs=30, promote_after=200)
    m = Models(canary=loop_answer)  # loops on every answer longer than one word
    fake = configure(m, cfg)
    with mirror_share(0.0):
        ask(NOTE_TEXT, arn=role("clinic-south"))
        ask(NOTE_TEXT + " again", arn=role("clinic-east"))
        for i in range(400):
            ask(f"Patient {i} reviewed", arn=role("clinic-north"), n=1)
            if switch(cfg, "split") or switch(cfg, "off"):
                break
        # after the promotion: what a real caller now gets from the canary
        served = []
        for i in range(12):
            st, body, _ = gen("m", {"inputs": NOTE_TEXT, "parameters": {"max_new_tokens": 32}},
                              arn=role("clinic-south"), headers={"X-Session-Key": f"k{i}"})
            served.append((body.get("version"), body.get("output", "")[:30]))
    ev = json.loads(switch(cfg, "split") or switch(cfg, "off") or "{}")
    canary_served = [s for s in served if s[0] == "2"]
    return ok(ev.get("action") != "promote", f"decision {ev.get('action')} at n={ev.get('n')}, "
              f"callers {ev.get('callers')}; after it {len(canary_served)}/12 new session keys get "
              f"the canary, e.g. {canary_served[:1]}")


@case("S13", "a good canary (identical answers) whose mirrors miss the invoke deadline on long "
      "generations (ReadTimeoutError: mirrors queue last, as the shadow sender)",
      "a deadline is not the canary's fault (service.CANARY_FAULTS); no rollback")
def _():
    cfg = canary_cfg(min_callers=2, min_pairs=30)

    def canary(t, n, p):
        if n >= 200:
            raise ReadTimeoutError(endpoint_url="https://runtime.sagemaker")
        return words(f"Patient note: {t}", n)
    m = Models(canary=canary)
    configure(m, cfg)
    with mirror_share(0.0):
        for i in range(60):
            who = role("clinic-north") if i % 3 else role("clinic-south")
            ask(f"{NOTE_TEXT} #{i}", arn=who, n=256 if i % 3 else 16)
            if switch(cfg, "off"):
                break
    ev = json.loads(switch(cfg, "off") or "{}")
    return ok(not ev, f"rolled back: {bool(ev)}; {ev.get('reason')!r}")


@case("S14", "a good canary whose mirrors meet SageMaker's own InternalFailure (502, not the "
      "container's)", "no rollback: InternalFailure is not in CANARY_FAULTS")
def _():
    cfg = canary_cfg(min_callers=1, min_pairs=30)

    def canary(t, n, p):
        raise model_error(code="InternalFailure")
    configure(Models(canary=canary), cfg)
    with mirror_share(0.0):
        for i in range(40):
            ask(f"q{i}")
            if switch(cfg, "off"):
                break
    ev = json.loads(switch(cfg, "off") or "{}")
    return ok(not ev, f"rolled back: {bool(ev)}; {ev.get('reason')!r}")


@case("S15", "a mirror cut by a dropped connection (ConnectionClosedError -> ConnectionLost)",
      "not the canary's answer")
def _():
    from botocore.exceptions import ConnectionClosedError
    cfg = canary_cfg(min_callers=1, min_pairs=30)

    def canary(t, n, p):
        raise ConnectionClosedError(endpoint_url="https://runtime.sagemaker")
    configure(Models(canary=canary), cfg)
    with mirror_share(0.0):
        for i in range(40):
            ask(f"q{i}")
            if switch(cfg, "off"):
                break
    ev = json.loads(switch(cfg, "off") or "{}")
    return ok(not ev, f"rolled back: {bool(ev)}; {ev.get('reason')!r}")


@case("S16", "mirrors refused for capacity or absence (429, 503 busy, ModelNotReady, "
      "ValidationError, ServiceUnavailable)", "no pair, no rollback")
def _():
    out = {}
    for name, exc in (("throttle", model_error(code="ThrottlingException")),
                      ("busy", model_error(503)), ("notready", model_error(code="ModelNotReadyException")),
                      ("absent", model_error(code="ValidationError")),
                      ("unavail", model_error(code="ServiceUnavailable"))):
        cfg = canary_cfg(version=f"2-{name}", min_pairs=30)

        def canary(t, n, p, exc=exc):
            raise exc
        configure(Models(canary=canary), cfg)
        with mirror_share(0.0):
            for i in range(35):
                ask(f"q{i}")
        out[name] = (pairs(cfg).get("n"), bool(switch(cfg, "off")))
    return ok(all(v == (None, False) for v in out.values()), out)


@case("S17", "the caller's own schema decides json_valid for both versions (a schema whose "
      "required key the answers lack)", "symmetric: no bias against either version")
def _():
    cfg = canary_cfg(margins={"json_valid": 0.05, "answered": 0.02, "repetition": 0.05})
    m = Models(stable=lambda t, n, p: '{"a": 1}', canary=lambda t, n, p: '{"a": 1}')
    configure(m, cfg)
    with mirror_share(0.0):
        for i in range(30):
            ask(f"q{i}", json_schema={"type": "object", "required": ["zzz"]})
    ev = json.loads(switch(cfg, "off") or "{}")
    p = pairs(cfg)
    return ok(not ev and p.get("s:json_valid") == p.get("c:json_valid"),
              f"sums stable {p.get('s:json_valid')} canary {p.get('c:json_valid')}; decision "
              f"{ev.get('action')}")


@case("S18", "a caller's json_schema with a malformed 'required' (an int) reaches the scorer",
      "the mirror fails cleanly (ShadowFailed) or is scored, the caller is unaffected")
def _():
    # Adapted (lora-fleet #50): the scorer now reads a 'required' that is not a list as none,
    # so the mirror no longer fails; either outcome is clean. An input long enough to score
    # (a pair of answers under 16 characters carries no evidence since the D1 fix).
    cfg = canary_cfg(margins={"json_valid": 0.05, "answered": 0.02})
    configure(Models(), cfg)
    out = io.StringIO()
    with mirror_share(0.0), contextlib.redirect_stdout(out):
        st, body = ask(NOTE_TEXT, json_schema={"type": "object", "required": 5})
    scored = pairs(cfg).get("n") == "1"
    return ok(st == 200 and ("ShadowFailed" in out.getvalue() or scored),
              f"{st}; ShadowFailed counted: {'ShadowFailed' in out.getvalue()}; scored: {scored}")


@case("S19", "a crafted 4 KB input (digit groups) makes the router score one mirror pair",
      "scoring cost bounded to milliseconds (it runs in the router beside callers, holding the GIL)")
def _():
    cfg = CanaryRoute.model_validate(canary_cfg(
        margins={"pii_leaked": 0.02, "facts_kept": 0.05, "answered": 0.02, "repetition": 0.05}))
    vals = " xxxx ".join(" ".join(f"{100+(i*31+j)%900:03d}" for j in range(30)) for i in range(32))
    t0 = time.perf_counter()
    shadow.pair(cfg, {"inputs": NOTE_TEXT}, NOTE_TEXT, NOTE_TEXT)
    normal = time.perf_counter() - t0
    t0 = time.perf_counter()
    shadow.pair(cfg, {"inputs": vals}, vals, "5 6 " * 1000)
    crafted = time.perf_counter() - t0
    return ok(crafted < 0.1, f"normal pair {normal*1000:.1f} ms; crafted {len(vals)}-char input, "
              f"echoed answer: {crafted*1000:.0f} ms ({crafted/normal:.0f}x) of pure-Python CPU")


@case("S20", "signals stay finite and in [0, 1] over 300 random hostile texts",
      "no NaN or inf reaches HINCRBYFLOAT")
def _():
    rng = random.Random(1)
    alphabet = "aA1 .,:-@_\n\t€字😀$%/" + "".join(chr(c) for c in range(0x300, 0x310))
    bad = []
    for _ in range(300):
        src = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300)))
        ans = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300)))
        vals = measure(SIGNALS, src, ans, lambda o: True)
        if any(not (0.0 <= v <= 1.0) for v in vals.values()):
            bad.append((src, ans, vals))
    return ok(not bad, f"{len(bad)} out of range")


# -- Redis outage and restart ------------------------------------------------------------------


@case("S21", "Redis outage during a test: pairs dropped (ShadowUnpaired), no decision, "
      "callers served", "no partial sums, no decision in one process")
def _():
    cfg = canary_cfg(min_pairs=30)
    dead = redis.Redis(host="127.0.0.1", port=1, socket_timeout=0.2, socket_connect_timeout=0.2)
    m = Models(canary=lambda t, n, p: "")
    fake = FakeSM(m)
    setup(table({"m": route("m", canary=cfg)}), fake, client=dead)
    sts = []
    with mirror_share(0.0):
        for i in range(40):
            sts.append(ask(f"q{i}")[0])
    R.flushdb()
    return ok(set(sts) == {200} and not R.keys("*"), f"statuses {set(sts)}; canary calls "
              f"{fake.components()[CANARY]}; keys written {R.keys('*')}")


@case("S22", "Redis restart (no persistence: dev's replicas 0) after a quality rollback, then a "
      "new execution environment", "a rolled-back canary stays rolled back (catalog: "
      "'until you remove it')")
def _():
    cfg = canary_cfg(min_pairs=30)
    reg = FakeRegistry(GROUP, ["1", "2"])
    cfg["registry_group"] = GROUP
    m = Models(canary=lambda t, n, p: "")
    fake = configure(m, cfg, registry=reg)
    with mirror_share(0.0):
        for i in range(40):
            ask(f"q{i}")
    first = switch(cfg, "off") is not None
    before = fake.components()[CANARY]
    R.flushall()                       # a node replaced or restarted without persistence
    fake = configure(m, cfg, registry=reg, flush=False)   # a new execution environment
    with mirror_share(0.0):
        for i in range(40):
            ask(f"r{i}")
    again = fake.components()[CANARY]
    return ok(again == 0, f"rolled back before: {first} ({before} mirrors); after the restart "
              f"the canary got {again} more mirrors and was judged from zero; registry writes: "
              f"{[u['ModelLifeCycle']['StageStatus'] for u in reg.updates]}")


@case("S23", "Redis restart after a 5xx rollback of a weighted (split) canary", "stays off")
def _():
    # Adapted (lora-fleet #50): every canary's decisions, the 5xx rule's included, are recorded
    # in its version's Model Registry package, which every deployed router has (service.deps
    # builds its Recorder, the catalog names the group); the original ran it with no registry.
    cfg = {"component": CANARY, "version": "2", "weight": 50, "max_error_rate": 0.2,
           "window_s": 300, "min_requests": 4, "min_callers": 1, "registry_group": GROUP}
    reg = FakeRegistry(GROUP, ["1", "2"])
    m = Models(canary=lambda t, n, p: (_ for _ in ()).throw(model_error(500)))
    fake = configure(m, cfg, registry=reg)
    for i in range(12):
        gen("m", {"inputs": f"a{i}"}, headers={"X-Session-Key": f"s{i}"})
    off = switch(cfg, "off") is not None
    R.flushall()
    m.canary = lambda t, n, p: "CANARY SERVED"
    fake = configure(m, cfg, registry=reg, flush=False)
    got = [gen("m", {"inputs": f"b{i}"}, headers={"X-Session-Key": f"t{i}"})[1].get("version")
           for i in range(10)]
    return ok(got.count("2") == 0, f"off before restart: {off}; after, versions served to 10 new "
              f"keys: {got}")


@case("S24", "Redis restart after a promotion to the split", "the promotion stands; session "
      "keys keep their version")
def _():
    # Adapted (lora-fleet #50): a decision's durable record is the canary version's Model
    # Registry package, which every deployed router has (service.deps builds its Recorder);
    # the original ran this case with no registry at all.
    cfg = canary_cfg(min_pairs=30, promote_after=60, registry_group=GROUP)
    reg = FakeRegistry(GROUP, ["1", "2"])
    m = Models()
    configure(m, cfg, registry=reg)
    with mirror_share(0.0):
        for i in range(200):
            ask(f"{NOTE_TEXT} {i}")
            if switch(cfg, "split"):
                break
    promoted = switch(cfg, "split") is not None
    keyed = [gen("m", {"inputs": "z"}, headers={"X-Session-Key": f"k{i}"})[1]["version"]
             for i in range(8)]
    R.flushall()
    configure(m, cfg, registry=reg, flush=False)
    after = [gen("m", {"inputs": "z"}, headers={"X-Session-Key": f"k{i}"})[1]["version"]
             for i in range(8)]
    return ok(after == keyed, f"promoted {promoted}; 8 session keys before {keyed}, after "
              f"{after}")


@case("S25", "the registry after a restart: a version recorded rolled-back is later recorded "
      "promoted (same package, overwritten)", "a decision recorded once, or the record keeps both")
def _():
    cfg = canary_cfg(min_pairs=30, promote_after=60, registry_group=GROUP)
    reg = FakeRegistry(GROUP, ["1", "2"])
    state = {"bad": True}

    def canary(t, n, p):
        return "" if state["bad"] else words(f"Patient note: {t}", n)
    m = Models(canary=canary)
    configure(m, cfg, registry=reg)
    with mirror_share(0.0):
        for i in range(40):
            ask(f"{NOTE_TEXT} {i}")
        R.flushall()
        state["bad"] = False     # e.g. the container recovered, or the inputs changed
        configure(m, cfg, registry=reg, flush=False)
        for i in range(300):
            ask(f"{NOTE_TEXT} again {i}")
            if switch(cfg, "split"):
                break
    statuses = [u["ModelLifeCycle"]["StageStatus"] for u in reg.updates]
    pkg = reg.packages[next(a for a, p in reg.packages.items() if p["version"] == "2")]
    return ok(len(statuses) <= 1, f"UpdateModelPackage statuses in order: {statuses}; the package "
              f"now says {pkg['life']['StageStatus']}, shadow-pairs {pkg['meta'].get('shadow-pairs')}")


@case("S26", "nothing the caller sends reaches UpdateModelPackage (prompts with JSON, "
      "quotes, '=cmd', newlines, the signal names)", "only numbers, catalog signal names, "
      "fixed words")
def _():
    cfg = canary_cfg(min_pairs=30, registry_group=GROUP)
    reg = FakeRegistry(GROUP, ["1", "2"])
    configure(Models(canary=lambda t, n, p: ""), cfg, registry=reg)
    marker = 'ZQX"\n=HYPERLINK(1)\u202e {"answered": 0} shadow-decision'
    with mirror_share(0.0):
        for i in range(40):
            gen("m", {"inputs": f"{marker} {i}"}, headers={"X-Session-Key": marker},
                arn=role("ZQXrole"))
            service.deps().mirrors.wait()
    blob = json.dumps(reg.updates)
    import re as _re
    bad_meta = [v for v in (reg.updates[0]["CustomerMetadataProperties"].values()
                            if reg.updates else [])
                if not _re.fullmatch(r"[\w\s.:/=+\-@]*", v) or len(v) > 256]
    return ok(reg.updates and "ZQX" not in blob and "HYPERLINK" not in blob and not bad_meta,
              f"{len(reg.updates)} update(s); caller text present: {'ZQX' in blob}; "
              f"description {reg.updates[0]['ModelLifeCycle']['StageDescription'][:120]!r}"
              if reg.updates else "no update")


@case("S27", "a held promotion keeps being judged and can later be recorded rolled back",
      "documented? (docs: 'with hold the decision is only logged and counted, and it stays a "
      "shadow')")
def _():
    cfg = canary_cfg(min_pairs=30, promote_after=60, promote="hold", registry_group=GROUP)
    reg = FakeRegistry(GROUP, ["1", "2"])
    state = {"bad": False}
    m = Models(canary=lambda t, n, p: "" if state["bad"] else words(f"Patient note: {t}", n))
    configure(m, cfg, registry=reg)
    with mirror_share(0.0):
        for i in range(300):
            ask(f"{NOTE_TEXT} {i}")
            if switch(cfg, "held"):
                break
        state["bad"] = True
        for i in range(200):
            ask(f"{NOTE_TEXT} b{i}")
            if switch(cfg, "off"):
                break
    statuses = [u["ModelLifeCycle"]["StageStatus"] for u in reg.updates]
    return "NOTE", f"registry statuses: {statuses} (held then rolled-back, both switches set)"


@case("S28", "a rolled-back shadow canary gets no more mirrors; late pairs count for nothing",
      "0 mirrors after the switch")
def _():
    cfg = canary_cfg(min_pairs=30)
    m = Models(canary=lambda t, n, p: "")
    fake = configure(m, cfg)
    with mirror_share(0.0):
        for i in range(30):
            ask(f"q{i}")
        n_at = fake.components()[CANARY]
        for i in range(20):
            ask(f"z{i}")
    return ok(fake.components()[CANARY] == n_at and switch(cfg, "off"),
              f"mirrors {n_at} then {fake.components()[CANARY]}")


@case("S29", "X-Session-Key / OpenAI user cannot put a caller on a shadow canary",
      "always stable while judging")
def _():
    cfg = canary_cfg()
    configure(Models(canary=lambda t, n, p: "CANARY"), cfg)
    vs = set()
    for i in range(30):
        vs.add(gen("m", {"inputs": "x"}, headers={"X-Session-Key": f"k{i}"})[1]["version"])
        vs.add(chat({"model": "m", "user": f"u{i}", "messages": [{"role": "user", "content": "x"}]}
                    )[1]["system_fingerprint"])
    return ok(vs == {"1", "m@1"}, vs)


@case("S30", "mirror slots held by one tenant's slow (long) mirrors: other tenants' requests are "
      "not mirrored (ShadowDropped), so the pairs come from that tenant",
      "mirrors shared fairly between callers")
def _():
    cfg = canary_cfg(min_callers=1, min_pairs=1000)

    def canary(t, n, p):
        time.sleep(0.3 if n >= 200 else 0.0)
        return words(f"Patient note: {t}", n)
    m = Models(canary=canary)
    configure(m, cfg)
    service.deps().mirrors = shadow.Mirrors(2)
    sent = collections.Counter()
    with mirror_share(0.0):
        t_end = time.time() + 3
        i = 0
        while time.time() < t_end:
            # the hog sends 2 long requests for each quiet-tenant request
            for who, n in (("clinic-north", 256), ("clinic-north", 256), ("clinic-south", 16)):
                gen("m", {"inputs": f"q{i} {who}", "parameters": {"max_new_tokens": n}}, arn=role(who))
                sent[who] += 1
                i += 1
            time.sleep(0.05)
        service.deps().mirrors.wait(30)
    mirrored = collections.Counter(p["inputs"].split()[-1] for c, p, _ in m.seen if c == CANARY)
    share = mirrored["clinic-north"] / max(1, sum(mirrored.values()))
    return "NOTE", (f"sent {dict(sent)}; mirrored {dict(mirrored)}: the long-request tenant holds "
                    f"{share:.0%} of the pairs for {sent['clinic-north']/sum(sent.values()):.0%} "
                    "of requests")


@case("S31", "sampled requests (OpenAI's default temperature 1) are mirrored and paired",
      "documented? pairs of independent samples")
def _():
    cfg = canary_cfg()
    m = Models()
    configure(m, cfg)
    with mirror_share(0.0):
        chat({"model": "m", "messages": [{"role": "user", "content": "x"}]})
        service.deps().mirrors.wait()
    temps = [p["parameters"].get("temperature") for c, p, _ in m.seen if c == CANARY]
    return "NOTE", (f"mirrored temperature {temps}: a sampled answer is paired with another "
                    "sample (noise, not bias)")


@case("S32", "a system-turn-only chat gives the scorer no text: answered/repetition only",
      "documented limit")
def _():
    cfg = CanaryRoute.model_validate(canary_cfg(margins={"facts_kept": 0.05, "answered": 0.02}))
    s, c = shadow.pair(cfg, {"messages": [{"role": "system", "content": NOTE_TEXT},
                                          {"role": "user", "content": "go"}]}, NOTE_TEXT, "")
    return "NOTE", f"signals measured: {sorted(s)} (facts in the system turn are not scored)"


@case("S33", "during a release the canary component still serves the previous canary version "
      "(2.0, rolled back for silence) while the table names 2.1: its answers are paired as 2.1's",
      "pairs only from answers whose artifact is the routed canary version (as "
      "_served_as_routed does for the cache)")
def _():
    cfg = canary_cfg(version="2.1", min_pairs=30, registry_group=GROUP)
    reg = FakeRegistry(GROUP, ["1", "2.0", "2.1"])
    m = Models(canary=lambda t, n, p: "", canary_version="2.0")
    configure(m, cfg, registry=reg)
    with mirror_share(0.0):
        for i in range(40):
            ask(f"q{i}")
            if switch(cfg, "off"):
                break
    ev = json.loads(switch(cfg, "off") or "{}")
    arns = [u["ModelPackageArn"].rsplit("/", 1)[-1] for u in reg.updates]
    return ok(not ev, f"2.1 rolled back: {bool(ev)} on {ev.get('n')} answers all reported as "
              f"artifact 2.0; registry updated package(s) #{arns} (= version 2.1's record)")


@case("S34", "stable's answer from a component still serving the previous stable version is "
      "paired too", "pairs compare the routed versions only")
def _():
    cfg = canary_cfg(min_pairs=30)
    m = Models(stable=lambda t, n, p: "", stable_version="0.9")
    configure(m, cfg)
    with mirror_share(0.0):
        for i in range(30):
            ask(f"q{i}")
    p = pairs(cfg)
    return ok(p.get("n") in (None, "0"), f"pairs counted with stable's artifact 0.9: n={p.get('n')}"
              f", stable answered-sum {p.get('s:answered')}")


@case("S35", "the 5xx rule's min_callers (r4's fix for F47) met by two roles of one partner "
      "admitted as ACCOUNT:*, each sending an input that makes the container fail",
      "one account cannot end a canary for everyone")
def _():
    cfg = {"component": CANARY, "version": "5", "weight": 50, "max_error_rate": 0.2,
           "window_s": 300, "min_requests": 10, "min_callers": 2}

    def canary(t, n, p):
        if "POISON" in t:
            raise model_error(500)
        return words(t, n)
    configure(Models(canary=canary), cfg, tenants=[f"{OTHER_ACCT}:*", "clinic-north"])
    for i in range(10):
        gen("m", {"inputs": "hello"}, headers={"X-Session-Key": f"n{i}"})
    for i in range(40):
        # the canary takes every other new session key: alternate the roles in pairs so both
        # roles' requests reach it
        who = role("probe-a" if (i // 2) % 2 else "probe-b", acct=OTHER_ACCT)
        gen("m", {"inputs": f"POISON {i}"}, arn=who, headers={"X-Session-Key": f"p{i}"})
        if switch(cfg, "off"):
            break
    return ok(not switch(cfg, "off"), f"off: {switch(cfg, 'off')!r} (both 'callers' are roles "
              f"of account {OTHER_ACCT})")


@case("S36", "a 1-token answer's signals are the same whatever the model (answered 1, "
      "repetition 0, facts/pii/json 0): such pairs carry no evidence but count toward a promotion",
      "pairs with too little text to score are not counted")
def _():
    # Adapted (lora-fleet #50): the fix keeps measure() as it is and counts no such pair:
    # shadow.pair gives no signal for two answers under 16 characters that both say something.
    route = CanaryRoute.model_validate(canary_cfg(
        margins={"pii_leaked": 0.02, "facts_kept": 0.05, "answered": 0.02, "repetition": 0.05,
                 "json_valid": 0.05}))
    rng = random.Random(3)
    vocab = ["Patient", "{", "The", "OK", "Sure", "1", "Dr", "I"]
    counted = 0
    for _ in range(200):
        a, b = rng.choice(vocab), rng.choice(vocab)
        s, c = shadow.pair(route, {"inputs": NOTE_TEXT}, a, b)
        counted += bool(s)
    return ok(counted == 0, f"{counted}/200 random 1-token pairs would be counted")


if __name__ == "__main__":
    dump("b_shadow")
