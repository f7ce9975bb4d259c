-- queue_send_many --
-- A message is a row; inserted in the caller's transaction, it exists only if that transaction commits.
INSERT INTO engine_queue (body)
SELECT unnest(%(bodies)s::text[]);
