package api

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/eventforge/eventforge/internal/failpoint"
)

// openAPIValidator is the independent validator: @apidevtools/swagger-parser
// under testdata/openapi, installed by `make test` (npm ci).
const openAPIValidator = "testdata/openapi"

// validateOpenAPI runs the validator on file. It fails the test (never skips
// it) when node or the validator's packages are missing.
func validateOpenAPI(t *testing.T, file string) ([]byte, error) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed to validate the OpenAPI document: %v", err)
	}
	if _, err := os.Stat(filepath.Join(openAPIValidator, "node_modules", "@apidevtools", "swagger-parser")); err != nil {
		t.Fatalf("the OpenAPI validator is not installed (run `make openapi-validator`, i.e. npm ci --prefix api/%s): %v", openAPIValidator, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, filepath.Join(openAPIValidator, "validate.mjs"), file).CombinedOutput()
	t.Logf("openapi validator: %s", out)
	return out, err
}

// reflectedServices lists the services the server reflection API reports.
func reflectedServices(t *testing.T, conn *grpc.ClientConn) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: "*"},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.CloseSend()
	if _, err := stream.Recv(); err != nil && !errors.Is(err, io.EOF) {
		t.Logf("closing reflection stream: %v", err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names
}

// armFailpoint arms spec in this process for the rest of the test; onFire,
// if not nil, runs when a point fires.
func armFailpoint(t *testing.T, spec string, onFire func()) {
	t.Helper()
	// OnFire is set before Arm: Arm's lock orders the write before any Eval.
	failpoint.OnFire = func(string, failpoint.Action) {
		if onFire != nil {
			onFire()
		}
	}
	if err := failpoint.Arm(spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := failpoint.Arm(""); err != nil {
			t.Error(err)
		}
	})
}
