"""Between runs (004 "Between Runs"): what keeps memory useful from one run to the next.

- `dedupe`: marks stale (never deletes) the items of one scope that repeat or contradict another.
- `fold`: folds lessons into /memories/playbook.md a few checked edits at a time, through a draft
  (/memories/playbook.next.md) a reviewer promotes while the agent is in playbook shadow mode.
- `observations`: per entity, what a model makes of the facts that hold now, as a memory file under
  /memories/observations/, written again only when those facts change.
- `brief`: the pre-turn brief, cards that quote what memory found for the turn.
- `passes`: the per-agent job bodies the beat schedules send (caps, continuation, usage).

Every piece asks the language model once per unit of work and checks what it answers before
anything is kept; what the model says is data, never an instruction.
"""
