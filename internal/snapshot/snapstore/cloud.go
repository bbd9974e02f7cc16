package snapstore

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"gocloud.dev/blob"
	"gocloud.dev/blob/azureblob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/gcp"
	"golang.org/x/oauth2/google"
	"google.golang.org/api/option"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/snapshot/payload"
)

// Keys of a credentials Secret for GCS and Azure Blob.
const (
	// CredGCSServiceAccount holds a Google service account key (JSON).
	CredGCSServiceAccount = "serviceAccount.json"
	// CredAzureAccountName and CredAzureAccountKey are an Azure storage account's shared key.
	CredAzureAccountName = "accountName"
	CredAzureAccountKey  = "accountKey"
)

// gcsScope lets the store read, write and delete objects.
const gcsScope = "https://www.googleapis.com/auth/devstorage.read_write"

// openGCS opens a GCS bucket with the service account of the credentials Secret (nil: the
// controller's Application Default Credentials). endpoint, when set, is the JSON API's base
// URL (an emulator).
func openGCS(ctx context.Context, c client.Reader, st *v1alpha1.SnapshotStore) (func(context.Context) (payload.Store, error), error) {
	sp := st.Spec
	var creds *google.Credentials
	if ref := sp.CredentialsSecretRef; ref != nil {
		data, err := secretData(ctx, c, st.Namespace, ref.Name, CredGCSServiceAccount)
		if err != nil {
			return nil, err
		}
		creds, err = google.CredentialsFromJSON(ctx, data[CredGCSServiceAccount], gcsScope)
		if err != nil {
			return nil, &CredentialsError{Secret: st.Namespace + "/" + ref.Name, Err: fmt.Errorf("key %q is not a Google service account key: %w", CredGCSServiceAccount, err)}
		}
	}
	return func(ctx context.Context) (payload.Store, error) {
		// A local copy: the opener may be called concurrently, and the captured creds is
		// shared by every call.
		cred := creds
		if cred == nil {
			var err error
			if cred, err = gcp.DefaultCredentials(ctx); err != nil {
				return nil, fmt.Errorf("no credentialsSecretRef and no Google Application Default Credentials: %w", err)
			}
		}
		hc, err := gcp.NewHTTPClient(gcp.DefaultTransport(), gcp.CredentialsTokenSource(cred))
		if err != nil {
			return nil, err
		}
		opts := &gcsblob.Options{}
		if sp.Endpoint != "" {
			opts.ClientOptions = []option.ClientOption{option.WithEndpoint(sp.Endpoint)}
		}
		b, err := gcsblob.OpenBucket(ctx, hc, sp.Bucket, opts)
		if err != nil {
			return nil, err
		}
		return prefixed(b, "gs", sp.Bucket, sp.Prefix)
	}, nil
}

// openAzure opens an Azure Blob container with the shared key of the credentials Secret (nil:
// the controller's Azure identity, which needs endpoint to name the account).
func openAzure(ctx context.Context, c client.Reader, st *v1alpha1.SnapshotStore) (func(context.Context) (payload.Store, error), error) {
	sp := st.Spec
	var cred *azblob.SharedKeyCredential
	svc := sp.Endpoint
	if ref := sp.CredentialsSecretRef; ref != nil {
		data, err := secretData(ctx, c, st.Namespace, ref.Name, CredAzureAccountName, CredAzureAccountKey)
		if err != nil {
			return nil, err
		}
		account := string(data[CredAzureAccountName])
		if cred, err = azblob.NewSharedKeyCredential(account, string(data[CredAzureAccountKey])); err != nil {
			return nil, &CredentialsError{Secret: st.Namespace + "/" + ref.Name, Err: fmt.Errorf("key %q: %w", CredAzureAccountKey, err)}
		}
		if svc == "" {
			svc = "https://" + url.PathEscape(account) + ".blob.core.windows.net"
		}
	} else if svc == "" {
		return nil, fmt.Errorf("snapshot store %s/%s: provider AzureBlob without credentialsSecretRef needs spec.endpoint (https://ACCOUNT.blob.core.windows.net)", st.Namespace, st.Name)
	}
	containerURL := strings.TrimSuffix(svc, "/") + "/" + url.PathEscape(sp.Bucket)
	return func(ctx context.Context) (payload.Store, error) {
		var cc *container.Client
		var err error
		if cred != nil {
			cc, err = container.NewClientWithSharedKeyCredential(containerURL, cred, nil)
		} else {
			cc, err = azureblob.NewDefaultClient(azureblob.ServiceURL(strings.TrimSuffix(svc, "/")+"/"), azureblob.ContainerName(sp.Bucket))
		}
		if err != nil {
			return nil, err
		}
		b, err := azureblob.OpenBucket(ctx, cc, nil)
		if err != nil {
			return nil, err
		}
		return prefixed(b, "azblob", sp.Bucket, sp.Prefix)
	}, nil
}

// prefixed wraps a bucket in the store's prefix and names its locations scheme://bucket/prefix.
func prefixed(b *blob.Bucket, scheme, bucket, prefix string) (payload.Store, error) {
	p := strings.Trim(prefix, "/")
	if p != "" {
		b = blob.PrefixedBucket(b, p+"/")
	}
	return payload.NewBlobStore(b, (&url.URL{Scheme: scheme, Host: bucket, Path: "/" + p}).String())
}
