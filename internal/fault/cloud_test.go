package fault_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"
	"google.golang.org/api/option"
	storage "google.golang.org/api/storage/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rewind-dev/rewind/internal/fault"
)

// answering starts a server that answers every request with code and body (of contentType),
// and headers.
func answering(t *testing.T, code int, contentType, body string, headers map[string]string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		for k, v := range headers {
			w.Header().Set(k, v)
		}
		w.WriteHeader(code)
		_, _ = fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// s3Bucket is gocloud.dev's S3 bucket, as rewind opens it, at endpoint, with one try per request
// (the SDK's own retries are not what is tested).
func s3Bucket(t *testing.T, endpoint string) *blob.Bucket {
	t.Helper()
	c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint), UsePathStyle: true, RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")})
	b, err := s3blob.OpenBucket(t.Context(), c, "bucket", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// The answers of a snapshot store's or a KMS's cloud service, as their own SDKs (through
// gocloud.dev, as rewind reads them) report them: a 429 or a 5xx, and an AWS throttling code
// answered 400, are faults; a refusal (403) or a missing object (404) is not. Before, every
// one of them was taken as a failure: a store away for longer than its SDK's own three tries
// (about 3 s) failed the restore of a rollback for good ("snapshot cannot be restored").
func TestIsTransientCloudAnswers(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		code int
		want bool
	}{{503, true}, {500, true}, {429, true}, {504, true}, {403, false}, {404, false}} {
		t.Run(fmt.Sprint(tc.code), func(t *testing.T) {
			// S3 (gocloud.dev's s3blob: the AWS SDK's ResponseError inside a *gcerr.Error).
			s3URL := answering(t, tc.code, "application/xml",
				`<?xml version="1.0" encoding="UTF-8"?><Error><Code>`+http.StatusText(tc.code)+`</Code><Message>test</Message></Error>`, nil)
			_, err := s3Bucket(t, s3URL).NewReader(ctx, "key", nil)
			if err == nil || fault.IsTransient(err) != tc.want {
				t.Errorf("S3 answered %d: %T %v; transient %v, want %v", tc.code, err, err, fault.IsTransient(err), tc.want)
			}

			// GCS (the JSON API's *googleapi.Error).
			gcs := answering(t, tc.code, "application/json", fmt.Sprintf(`{"error":{"code":%d,"message":"test"}}`, tc.code), nil)
			svc, err := storage.NewService(ctx, option.WithEndpoint(gcs+"/storage/v1/"), option.WithoutAuthentication())
			if err != nil {
				t.Fatal(err)
			}
			_, err = svc.Objects.Get("bucket", "key").Context(ctx).Do()
			if err == nil || fault.IsTransient(err) != tc.want {
				t.Errorf("GCS answered %d: %T %v; transient %v, want %v", tc.code, err, err, fault.IsTransient(err), tc.want)
			}

			// Azure Blob (*azcore.ResponseError).
			az := answering(t, tc.code, "application/xml", `<?xml version="1.0" encoding="utf-8"?><Error><Code>Test</Code><Message>test</Message></Error>`,
				map[string]string{"x-ms-error-code": "Test"})
			key := "dGVzdA==" // base64 of "test"
			cred, err := azblob.NewSharedKeyCredential("account", key)
			if err != nil {
				t.Fatal(err)
			}
			ac, err := azblob.NewClientWithSharedKeyCredential(az+"/account", cred, &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{
				Retry: policy.RetryOptions{MaxRetries: -1}, InsecureAllowCredentialWithHTTP: true,
			}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = ac.DownloadStream(ctx, "container", "key", nil)
			if err == nil || fault.IsTransient(err) != tc.want {
				t.Errorf("Azure answered %d: %T %v; transient %v, want %v", tc.code, err, err, fault.IsTransient(err), tc.want)
			}
		})
	}

	// A connection reset before any answer: the AWS SDK reports it as a response error of
	// status 0, around the transport's error (before the fix of the first of these checks, a
	// status 0 was taken as a refusal, and a reset failed a restore for good).
	reset := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		c, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}))
	t.Cleanup(reset.Close)
	if _, err := s3Bucket(t, reset.URL).NewReader(ctx, "key", nil); err == nil || !fault.IsTransient(err) {
		t.Errorf("S3 reset the connection: %T %v; transient %v, want true", err, err, fault.IsTransient(err))
	}

	// A 200 whose body was cut (the connection closed before its Content-Length): the AWS SDK
	// reports a response error of status 200 around the unexpected end of file. A fault, not a
	// refusal (a first version of the fix took every AWS status as the verdict).
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		_, _ = fmt.Fprint(w, `{"KeyId":`)
	}))
	t.Cleanup(cut.Close)
	kc := kms.New(kms.Options{Region: "us-east-1", BaseEndpoint: aws.String(cut.URL), RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")})
	if _, err := kc.Decrypt(ctx, &kms.DecryptInput{CiphertextBlob: []byte("x")}); err == nil || !fault.IsTransient(err) {
		t.Errorf("KMS answered 200 and its body was cut: %T %v; transient %v, want true", err, err, fault.IsTransient(err))
	}

	// Google Cloud KMS (gRPC): unavailable or exhausted is a fault, a refusal is not.
	for code, want := range map[codes.Code]bool{codes.Unavailable: true, codes.ResourceExhausted: true, codes.PermissionDenied: false, codes.NotFound: false} {
		err := fmt.Errorf("secrets (code=%s): %w", code, status.Error(code, "test"))
		if fault.IsTransient(err) != want {
			t.Errorf("gRPC %s: transient %v, want %v", code, fault.IsTransient(err), want)
		}
	}

	// An AWS KMS throttled (400 ThrottlingException), as the SDK's own retryer sees it, is a
	// fault; a key that is disabled (400 DisabledException) is not.
	for code, want := range map[string]bool{"ThrottlingException": true, "DisabledException": false} {
		url := answering(t, http.StatusBadRequest, "application/x-amz-json-1.1", `{"__type":"`+code+`","message":"test"}`, nil)
		c := kms.New(kms.Options{Region: "us-east-1", BaseEndpoint: aws.String(url), RetryMaxAttempts: 1,
			Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")})
		_, err := c.Decrypt(ctx, &kms.DecryptInput{CiphertextBlob: []byte("x")})
		if err == nil || fault.IsTransient(err) != want {
			t.Errorf("KMS answered %s: %T %v; transient %v, want %v", code, err, err, fault.IsTransient(err), want)
		}
	}
}
