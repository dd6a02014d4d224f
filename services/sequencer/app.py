"""Sequencer process: ring wiring around `services.sequencer.logic.Sequencer`."""

from __future__ import annotations

from fastapi import FastAPI
from prometheus_client import Gauge

from services.sequencer.logic import Sequencer
from weaseldb.core import channels, requestids
from weaseldb.core.clock import now_ms
from weaseldb.core.config import Config
from weaseldb.core.protocol import RingEntry
from weaseldb.core.types import Stage
from weaseldb.runtime.relay import RelayStage
from weaseldb.runtime.ring import Endpoints, Transport
from weaseldb.runtime.service import Health, stage_app

REMEMBERED = Gauge("weaseldb_sequencer_request_ids", "Request ids remembered exactly")


def build(config: Config, ring: Transport) -> tuple[RelayStage, FastAPI]:
    endpoints = Endpoints(config)
    run_dir = config.run_dir
    ids = config.idempotency
    sequencer = Sequencer(
        ids.request_id_memory,
        window_ms=int(ids.request_id_window_s * 1000),
        id_hard_cap=ids.request_id_max,
        load_window=lambda name: requestids.decode_window(
            channels.id_window_path(run_dir, name).read_bytes()
        ),
    )
    health = Health(reason="waiting for a term")

    def process(entries: list[RingEntry]) -> list[RingEntry]:
        forward = sequencer.sequence(entries, now_ms())
        if sequencer.leading and not health.ready:
            health.set(True, "leading")
        health.readiness.last_assigned_version = sequencer.last_assigned
        REMEMBERED.set(sequencer.remembered)
        return forward

    stage = RelayStage(
        Stage.SEQUENCER,
        ring.inbox(endpoints.sequencer),
        ring.outbox(endpoints.resolver),
        process,
        shutdowns_expected=config.gateway.workers,
        drain_timeout_s=config.drain_timeout_s,
        health=health,
    )
    return stage, stage_app(Stage.SEQUENCER, health)
