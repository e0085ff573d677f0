package rpc

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strconv"
	"time"

	"github.com/google/uuid"

	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// pageToken is a ListOrders position: the last order of the previous page
// and a digest of the filters it was issued for.
type pageToken struct {
	CreatedAt time.Time
	ID        uuid.UUID
	Filter    [8]byte
}

const pageTokenVersion = 1

// Encoded layout (base64url, no padding): version byte, created_at as
// Unix microseconds (int64), order ID (16 bytes), filter digest (8 bytes).
const pageTokenLen = 1 + 8 + 16 + 8

func encodePageToken(t pageToken) string {
	b := make([]byte, 0, pageTokenLen)
	b = append(b, pageTokenVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(t.CreatedAt.UnixMicro()))
	b = append(b, t.ID[:]...)
	b = append(b, t.Filter[:]...)
	return base64.RawURLEncoding.EncodeToString(b)
}

var errBadPageToken = errors.New("malformed page token")

func decodePageToken(s string) (pageToken, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != pageTokenLen || b[0] != pageTokenVersion {
		return pageToken{}, errBadPageToken
	}
	var t pageToken
	t.CreatedAt = time.UnixMicro(int64(binary.BigEndian.Uint64(b[1:9]))).UTC()
	copy(t.ID[:], b[9:25])
	copy(t.Filter[:], b[25:])
	return t, nil
}

// filterDigest identifies the filters of a listing, so a token is refused
// when sent with other filters.
func filterDigest(customerID string, status eventforgev1.OrderStatus) [8]byte {
	sum := sha256.Sum256([]byte(strconv.Itoa(len(customerID)) + ":" + customerID + "|" + strconv.Itoa(int(status))))
	var d [8]byte
	copy(d[:], sum[:])
	return d
}
