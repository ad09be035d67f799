#!/usr/bin/env python3
"""make_reference.py - prints the exposition that prometheus_client produces for
the registries built in tests/unit/test_metrics.c, as C string literals to paste
there: REF_TEXT / REF_OPENMETRICS (test_exposition_matches_prometheus_client) and
REF_SMALL_TEXT / REF_SMALL_OPENMETRICS (test_suffixes_and_negative_buckets_match_prometheus_client).

Not run by CI. To regenerate:
    python3 -m venv /tmp/pcvenv && /tmp/pcvenv/bin/pip install prometheus_client==0.22.1
    /tmp/pcvenv/bin/python tests/metrics/make_reference.py
prometheus_client 0.22.1 is the last release with the exposition vLLM has long
served: from 0.23 choose_encoder honours version/escaping parameters, and under
escaping=underscores OpenMetrics sample names lose their colons ("vllm_x_total").
Keep every metric, label value, observation and _created time here in step with
the C test; _created is pinned by assigning child._created right after creation.
"""
import math

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

T0 = 1763748828.123
T1 = 1763748829.0
T2 = 1763748828.5


def build():
    r = CollectorRegistry()
    succ = Counter('vllm:request_success_total', 'Count of successfully processed requests.',
                   ['model_name', 'engine', 'finished_reason'], registry=r)
    for reason, t in (('stop', T0), ('length', T1)):
        c = succ.labels('m', '0', reason)
        c._created = t
    succ.labels('m', '0', 'stop').inc(3)
    succ.labels('m', '0', 'length').inc(1234567)

    plain = Counter('plain', 'Help with \\ backslash,\nnewline and "quotes".', registry=r)
    plain._created = T2  # a metric without labels is its own child, created with the metric
    plain.inc(0.5)

    g = Gauge('vllm:num_requests_running', 'Number of requests in model execution batches.',
              ['model_name', 'engine'], registry=r)
    g.labels('m', '0').set(773)
    g.labels('a"b\\c\nd', '1').set(-2.5)

    f = Gauge('float_formats', 'Float formatting.', ['case'], registry=r)
    cases = [('zero', 0.0), ('negzero', -0.0), ('one', 1.0), ('tenth', 0.1), ('small', 1e-05),
             ('six', 123456.0), ('seven', 1234567.0), ('eight', 10000000.0), ('neg7', -1234567.0),
             ('e15', 1e15), ('e16', 1e16), ('e22', 1e22), ('frac', 1234567.891), ('inf', math.inf),
             ('ninf', -math.inf), ('nan', math.nan)]
    for name, v in cases:
        f.labels(name).set(v)

    Gauge('empty_gauge', 'No children yet.', ['a'], registry=r)

    h = Histogram('vllm:e2e_request_latency_seconds', 'Histogram of e2e request latency in seconds.',
                  ['model_name', 'engine'], buckets=[0.001, 0.5, 1, 2560], registry=r)
    c = h.labels('m', '0')
    c._created = T0
    for v in (0.0005, 0.001, 0.3, 0.5, 7, 2560, 1e9):
        c.observe(v)
    c = h.labels('m', '1')
    c._created = T1

    s = Summary('request_size_bytes', 'A summary without labels.', registry=r)
    s._created = T2
    s.observe(0.25)
    s.observe(1e9)
    return r


def build_small():
    r = CollectorRegistry()
    h = Histogram('neg', 'n', buckets=[-1, 0], registry=r)  # first bound < 0: no _sum sample
    h._created = 5.0
    h.observe(-3)
    Gauge('bar_total', 'b', registry=r)  # only a counter loses "_total"
    c = Counter('foo', 'f', registry=r)  # declared without "_total": exposed with it
    c._created = 1.0
    return r


def c_literal(name, text):
    out = [f'static const char {name}[] =']
    for line in text.splitlines(keepends=True):
        esc = line.replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n')
        out.append(f'    "{esc}"')
    return '\n'.join(out) + ';\n'


if __name__ == '__main__':
    r = build()
    print(c_literal('REF_TEXT', generate_latest(r).decode()))
    print(c_literal('REF_OPENMETRICS', generate_openmetrics(r).decode()))
    r = build_small()
    print(c_literal('REF_SMALL_TEXT', generate_latest(r).decode()))
    print(c_literal('REF_SMALL_OPENMETRICS', generate_openmetrics(r).decode()))
