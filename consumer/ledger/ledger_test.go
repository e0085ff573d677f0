package ledger

import (
	"context"
	"math/big"
	"testing"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/eventforge/eventforge/consumer/engine"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// rules returns the protovalidate rules of a field of msg.
func rules(t *testing.T, msg proto.Message, field protoreflect.Name) *validate.FieldRules {
	t.Helper()
	fd := msg.ProtoReflect().Descriptor().Fields().ByName(field)
	if fd == nil {
		t.Fatalf("%s has no field %s", msg.ProtoReflect().Descriptor().FullName(), field)
	}
	r, ok := proto.GetExtension(fd.Options(), validate.E_Field).(*validate.FieldRules)
	if !ok || r == nil {
		t.Fatalf("%s.%s declares no rules", msg.ProtoReflect().Descriptor().FullName(), field)
	}
	return r
}

// TestLedgerSumsCannotOverflow: the largest orders the API accepts (bounds
// read from the rules declared in orders.proto, the ones the API enforces),
// created and cancelled many times for one customer, are summed exactly:
// far past what a bigint holds, and no event is refused.
func TestLedgerSumsCannotOverflow(t *testing.T) {
	maxItems := rules(t, &eventforgev1.CreateOrderRequest{}, "items").GetRepeated().GetMaxItems()
	maxQuantity := rules(t, &eventforgev1.OrderItem{}, "quantity").GetInt32().GetLte()
	maxPrice := rules(t, &eventforgev1.OrderItem{}, "unit_price_cents").GetInt64().GetLte()
	if maxItems == 0 || maxQuantity == 0 || maxPrice == 0 {
		t.Fatalf("orders.proto declares no upper bound: items %d, quantity %d, unit price %d", maxItems, maxQuantity, maxPrice)
	}
	items := make([]*eventforgev1.OrderItem, maxItems)
	maxTotal := new(big.Int)
	for i := range items {
		items[i] = &eventforgev1.OrderItem{Sku: "S", Quantity: maxQuantity, UnitPriceCents: maxPrice}
		maxTotal.Add(maxTotal, new(big.Int).Mul(big.NewInt(int64(maxQuantity)), big.NewInt(maxPrice)))
	}
	if !maxTotal.IsInt64() {
		t.Fatalf("the largest order total %s does not fit in orders.total_cents (bigint)", maxTotal)
	}
	total := maxTotal.Int64()

	env := testenv.New(t)
	ctx := context.Background()
	const orders = 20 // 20 × the largest total is more than twice 2^63
	for range orders {
		id := uuid.Must(uuid.NewV7()).String()
		if _, err := env.Pool.Exec(ctx, `INSERT INTO orders (id, customer_id, currency, total_cents, status, created_at, updated_at)
			VALUES ($1, 'c-big', 'EUR', $2, 'created', now(), now())`, id, total); err != nil {
			t.Fatal(err)
		}
		created, err := protojson.Marshal(&eventforgev1.OrderCreated{OrderId: id, CustomerId: "c-big", Currency: "EUR", Items: items, TotalCents: total})
		if err != nil {
			t.Fatal(err)
		}
		cancelled, err := protojson.Marshal(&eventforgev1.OrderCancelled{OrderId: id, CustomerId: "c-big"})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range []engine.Event{
			{ID: uuid.Must(uuid.NewV7()), Type: contract.TypeOrderCreated, Key: id, Payload: created},
			{ID: uuid.Must(uuid.NewV7()), Type: contract.TypeOrderCancelled, Key: id, Payload: cancelled},
		} {
			if err := pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error { return Handler{}.Apply(ctx, tx, ev) }); err != nil {
				t.Fatalf("applying %s of order %s: %v", ev.Type, id, err)
			}
		}
	}
	var count, cancelledCount int64
	var sum, cancelledSum string
	if err := env.Pool.QueryRow(ctx, `SELECT order_count, total_cents::text, cancelled_count, cancelled_cents::text
		FROM ledger WHERE customer_id = 'c-big' AND currency = 'EUR'`).Scan(&count, &sum, &cancelledCount, &cancelledSum); err != nil {
		t.Fatal(err)
	}
	want := new(big.Int).Mul(maxTotal, big.NewInt(orders)).String()
	if count != orders || cancelledCount != orders || sum != want || cancelledSum != want {
		t.Fatalf("ledger: %d orders summing %s, %d cancellations summing %s; want %d and %s for both", count, sum, cancelledCount, cancelledSum, orders, want)
	}
}
