"""The run event ledger (000 `RunLedger`, `SnapshotAccumulator`, `RunEvent` / `RunSnapshot`): a run of
a thread publishes its events; subscribers follow them in order over Server-Sent Events."""
