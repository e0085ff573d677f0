-- The relay's checkpoint names its slot's incarnation and when the mark
-- behind published_below was taken.
--
-- generation is the start position of the slot a gap recovery created (NULL
-- before the first recovery): a position an exactly-once relay committed to
-- Kafka counts only for the incarnation it names (docs/cdc.md,
-- "Exactly-once into Kafka"). published_below_at is when the mark behind
-- published_below was taken: an exactly-once gap recovery looks in Kafka
-- from a little before it for the records already published.

-- +goose Up
ALTER TABLE cdc_checkpoints ADD COLUMN generation text;
ALTER TABLE cdc_checkpoints ADD COLUMN published_below_at timestamptz;

-- +goose Down
ALTER TABLE cdc_checkpoints DROP COLUMN published_below_at;
ALTER TABLE cdc_checkpoints DROP COLUMN generation;
