package rpc

import (
	"crypto/hmac"
	"crypto/rand"
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

const pageTokenVersion = 2

// Encoded layout (base64url, no padding): version byte, created_at as
// Unix microseconds (int64), order ID (16 bytes), filter digest (8 bytes),
// then the first 16 bytes of HMAC-SHA256 over everything before it.
const (
	pageTokenBody = 1 + 8 + 16 + 8
	pageTokenMAC  = 16
	pageTokenLen  = pageTokenBody + pageTokenMAC
)

// MinPageTokenKeyLen is the shortest page token key accepted, in bytes.
const MinPageTokenKeyLen = 32

// pageTokens signs and verifies page tokens with one HMAC-SHA256 key, so a
// token is accepted only from a process holding the same key: a forged or
// altered token is refused as a field violation and never reaches the store.
type pageTokens struct{ key []byte }

// randomKey returns a new random page token key.
func randomKey() []byte {
	k := make([]byte, MinPageTokenKeyLen)
	_, _ = rand.Read(k) // crypto/rand.Read never returns an error
	return k
}

func (p pageTokens) mac(body []byte) []byte {
	m := hmac.New(sha256.New, p.key)
	m.Write(body)
	return m.Sum(nil)[:pageTokenMAC]
}

func (p pageTokens) encode(t pageToken) string {
	b := make([]byte, 0, pageTokenLen)
	b = append(b, pageTokenVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(t.CreatedAt.UnixMicro()))
	b = append(b, t.ID[:]...)
	b = append(b, t.Filter[:]...)
	b = append(b, p.mac(b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

var errBadPageToken = errors.New("page token not issued by this service")

func (p pageTokens) decode(s string) (pageToken, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != pageTokenLen || b[0] != pageTokenVersion {
		return pageToken{}, errBadPageToken
	}
	if !hmac.Equal(p.mac(b[:pageTokenBody]), b[pageTokenBody:]) {
		return pageToken{}, errBadPageToken
	}
	var t pageToken
	t.CreatedAt = time.UnixMicro(int64(binary.BigEndian.Uint64(b[1:9]))).UTC()
	copy(t.ID[:], b[9:25])
	copy(t.Filter[:], b[25:pageTokenBody])
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
