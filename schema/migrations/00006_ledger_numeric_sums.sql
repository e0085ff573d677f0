-- The ledger's money sums become numeric: a customer's sum of order totals
-- grows without bound, and bigint would overflow after a handful of large
-- orders (each order total is at most 10^18 minor units, see
-- proto/eventforge/v1/orders.proto), dead-lettering a valid event. numeric
-- holds any such sum exactly; the counts stay bigint.

-- +goose Up
ALTER TABLE ledger
    ALTER COLUMN total_cents TYPE numeric,
    ALTER COLUMN cancelled_cents TYPE numeric;

-- +goose Down
ALTER TABLE ledger
    ALTER COLUMN total_cents TYPE bigint,
    ALTER COLUMN cancelled_cents TYPE bigint;
