"""The program of every BFCL sandbox job (its source is sent to ``pool.run_python``; the host never
imports it). Standard library only: BFCL's backends (and mpmath, which ``math_api`` imports) come
as code bundles, compiled once per pool by a first job of the same program (``op: compile``).

Request: one JSON document on stdin. Report: one JSON document on fd 3. Files: ``code.bin`` (and
``mpmath.bin``), the marshalled bundles; ``model.pkl`` / ``truth.pkl``, the pickled backend
instances of the episode and of the ground truth (absent: fresh instances from the task's
``initial_config``). The pickles are made and read only in here: the host carries them as opaque
bytes and never unpickles them.

Ops (``op: run``), in order, on the instances:
- ``{"kind": "calls", "calls": [{name, arguments}]}``: the episode's calls, each as BFCL's
  ``execute_multi_turn_func_call`` would run it, but dispatched by name (``getattr``) with JSON
  arguments instead of ``eval`` of a string: a name outside ``methods`` (the task's tool list) is
  not run; a backend exception is the result ``"Error during execution: <message>"``;
- ``{"kind": "check", "calls": [...]}``: the ground truth's calls of one turn on the truth's
  instances, then the public attributes on which the two differ (BFCL's ``_compare_instances``).
"""

import base64
import copy
import importlib
import importlib.machinery
import json
import marshal
import os
import pickle
import sys

ERROR = "Error during execution: "


class Bundle:
    """A meta path finder and loader of modules from ``{name: (is_package, marshalled code)}``
    (duck-typed: importing ``importlib.abc`` would cost more than the rest of a job)."""

    def __init__(self, modules):
        self.modules = modules

    def find_spec(self, name, path=None, target=None):
        if name not in self.modules:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=self.modules[name][0])

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        exec(marshal.loads(self.modules[module.__name__][1]), module.__dict__)


def compile_bundle(manifest):
    out = {}
    for name, (is_pkg, path, filename) in manifest.items():
        with open(path, encoding="utf-8") as f:
            out[name] = (is_pkg, marshal.dumps(compile(f.read(), filename, "exec", dont_inherit=True)))
    return marshal.dumps(out)


def new_instances(req):
    instances = {}
    for cls in req["classes"]:
        module = importlib.import_module(req["package"] + "." + req["modules"][cls])
        obj = getattr(module, cls)()
        if cls not in req["stateless"]:
            obj._load_scenario(copy.deepcopy(req["initial_config"].get(cls, {})), long_context=req["long_context"])
        instances[cls] = obj
    return instances


def result_text(value):
    """BFCL's conversion of a backend's return value to the result string."""
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except Exception:
            return str(value)
    return str(value)


def fresh_defaults(method, args):
    """``args`` with a fresh copy of each mutable default the call leaves out. ``post_tweet(content,
    tags=[], mentions=[])`` stores its default list in the tweet, and ``mention`` extends it in place:
    one list for every bare post of the process, the model's and the ground truth's alike, so a
    mention the model added showed in the truth's tweets too (the state check blinded)."""
    f = getattr(method, "__func__", None)
    code = getattr(f, "__code__", None)
    if code is None:
        return args
    positional = f.__defaults__ or ()
    first = code.co_argcount - len(positional)
    defaults = {code.co_varnames[first + i]: d for i, d in enumerate(positional)}
    defaults.update(f.__kwdefaults__ or {})
    missing = {k: copy.deepcopy(v) for k, v in defaults.items() if k not in args and type(v) in (list, dict, set)}
    return {**args, **missing} if missing else args


def execute(instances, methods, calls):
    results = []
    for call in calls:
        name, args = call["name"], call["arguments"]
        cls = methods.get(name)
        if cls is None or cls not in instances or name.startswith("_") or not isinstance(args, dict):
            results.append(f"{ERROR}unknown function {name!r}: not one of this task's tools")
            continue
        try:
            method = getattr(instances[cls], name)
            results.append(result_text(method(**fresh_defaults(method, args))))
        except Exception as e:
            results.append(f"{ERROR}{e}")
    return results


def differences(model, truth):
    """``{class: [attribute, ...]}`` where the model's public state differs from the truth's."""
    out = {}
    for cls, gt in truth.items():
        attrs = [a for a in vars(gt) if not a.startswith("_") and getattr(model[cls], a) != getattr(gt, a)]
        if attrs:
            out[cls] = attrs
    return out


def load_state(name, req):
    if os.path.exists(name):
        with open(name, "rb") as f:
            return pickle.load(f)
    return new_instances(req)


def main():
    req = json.loads(sys.stdin.buffer.read())
    if req["op"] == "compile":
        data = compile_bundle(req["manifest"])
    else:
        for name in ("code.bin", "mpmath.bin"):
            if os.path.exists(name):
                with open(name, "rb") as f:
                    sys.meta_path.insert(0, Bundle(marshal.loads(f.read())))
        model, truth = load_state("model.pkl", req), None
        reports = []
        for op in req["ops"]:
            if op["kind"] == "calls":
                reports.append({"results": execute(model, req["methods"], op["calls"])})
            else:
                truth = load_state("truth.pkl", req) if truth is None else truth
                results = execute(truth, req["methods"], op["calls"])
                reports.append({"truth_results": results, "diff": differences(model, truth)})
        out = {"ops": reports}
        if req["dump"]:
            if any(op["kind"] == "calls" for op in req["ops"]):
                out["model_state"] = base64.b64encode(pickle.dumps(model)).decode()
            if truth is not None:
                out["truth_state"] = base64.b64encode(pickle.dumps(truth)).decode()
        data = json.dumps(out).encode()
    with os.fdopen(3, "wb") as f:
        f.write(data)


if __name__ == "__main__":
    main()
