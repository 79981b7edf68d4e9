-- The running replicas and the lock space each takes its product locks in (issue #31): a key
-- prefix on a Redis, named by the random token of its binding (<prefix>database), or one token
-- per Redlock node. Replicas of one database must share one lock space: each has fencing
-- counters of its own, and the products' fence column refuses the lower ones for ever. Each
-- replica writes its row every few seconds and deletes it when it stops; a row not written for
-- three beats is a replica that died. Nothing else reads or writes it.
CREATE TABLE replicas (
    id          TEXT PRIMARY KEY,
    host        TEXT NOT NULL,
    prefix      TEXT NOT NULL,
    redis       TEXT NOT NULL,
    lock_space  TEXT[] NOT NULL,
    started_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    seen_at     TIMESTAMPTZ NOT NULL DEFAULT now()
);
