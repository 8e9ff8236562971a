#!/usr/bin/env python3
"""Checks a file against the Chrome trace-event format (the JSON object form that
ui.perfetto.dev and chrome://tracing load) and prints a JSON summary of what it holds.

Rules (Trace Event Format, the phases llmrr writes): the top level is an object with a
"traceEvents" list; every event has a string "ph" and an int "pid"; "X" (complete) has a
string name, numeric ts >= 0 and dur >= 0 and an int tid; "C" (counter) has a name, ts and
an "args" object of numbers; "M" (metadata) is one of process_name / thread_name /
process_sort_index / thread_sort_index with the matching args; slices on one track do not
overlap (a track's X events nest or follow each other). Exit 1 with the first violation."""
import json
import sys

def fail(msg):
    print("invalid trace-event file: " + msg, file=sys.stderr)
    sys.exit(1)

def num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)

doc = json.load(open(sys.argv[1]))
if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
    fail("top level must be an object with a traceEvents list")
tracks = {}
names = {}
counters = {}
slices = {}
for i, e in enumerate(doc["traceEvents"]):
    where = "event %d" % i
    if not isinstance(e, dict) or not isinstance(e.get("ph"), str):
        fail(where + ": no ph")
    if not isinstance(e.get("pid"), int):
        fail(where + ": pid must be an int")
    ph = e["ph"]
    if ph == "X":
        if not isinstance(e.get("name"), str) or not isinstance(e.get("tid"), int):
            fail(where + ": X needs a name and an int tid")
        if not num(e.get("ts")) or e["ts"] < 0 or not num(e.get("dur")) or e["dur"] < 0:
            fail(where + ": X needs ts >= 0 and dur >= 0")
        tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
        slices[e.get("cat", "")] = slices.get(e.get("cat", ""), 0) + 1
    elif ph == "C":
        args = e.get("args")
        if not isinstance(e.get("name"), str) or not num(e.get("ts")) or not isinstance(args, dict):
            fail(where + ": C needs a name, ts and args")
        if not args or not all(num(v) for v in args.values()):
            fail(where + ": counter args must be numbers")
        counters[e["name"]] = counters.get(e["name"], 0) + 1
    elif ph == "M":
        n = e.get("name")
        args = e.get("args", {})
        if n in ("process_name", "thread_name"):
            if not isinstance(args.get("name"), str):
                fail(where + ": " + n + " needs args.name")
            if n == "thread_name":
                if not isinstance(e.get("tid"), int):
                    fail(where + ": thread_name needs a tid")
                names[(e["pid"], e["tid"])] = args["name"]
        elif n in ("process_sort_index", "thread_sort_index"):
            if not isinstance(args.get("sort_index"), int):
                fail(where + ": " + n + " needs an int args.sort_index")
        else:
            fail(where + ": unknown metadata " + str(n))
    else:
        fail(where + ": phase " + ph + " is not one llmrr writes")
for track, spans in tracks.items():
    spans.sort()
    for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
        if b0 < a1 and b1 > a1:
            fail("slices overlap on track %s: [%g, %g) and [%g, %g)" % (track, a0, a1, b0, b1))
    if track not in names:
        fail("track %s has slices but no thread_name" % (track,))
print(json.dumps({"events": len(doc["traceEvents"]), "tracks": len(tracks),
                  "thread_names": sorted(names.values()), "slices": slices,
                  "counters": counters}))
