package operator

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Convert converts one MySQLCluster to apiVersion (database.example.com/<version>). The only
// schema difference between the versions is the rename of spec.version (v1alpha1, v1beta1) to
// spec.mysqlVersion (v1); defaults are the API server's business. Every other field, including
// fields this code does not know, is carried over unchanged: a conversion never drops data.
func Convert(in *unstructured.Unstructured, apiVersion string) (*unstructured.Unstructured, error) {
	gv, err := schemaGroupVersion(apiVersion)
	if err != nil {
		return nil, err
	}
	from, err := schemaGroupVersion(in.GetAPIVersion())
	if err != nil {
		return nil, err
	}
	out := in.DeepCopy()
	out.SetAPIVersion(apiVersion)
	if from == gv {
		return out, nil
	}
	spec, ok, _ := unstructured.NestedMap(out.Object, "spec")
	if !ok {
		return out, nil
	}
	switch {
	case gv == "v1" && from != "v1":
		rename(spec, "version", "mysqlVersion")
	case gv != "v1" && from == "v1":
		rename(spec, "mysqlVersion", "version")
	}
	if err := unstructured.SetNestedMap(out.Object, spec, "spec"); err != nil {
		return nil, err
	}
	return out, nil
}

func rename(m map[string]any, from, to string) {
	if v, ok := m[from]; ok {
		if _, taken := m[to]; !taken {
			m[to] = v
		}
		delete(m, from)
	}
}

func schemaGroupVersion(apiVersion string) (string, error) {
	for _, v := range []string{"v1alpha1", "v1beta1", "v1"} {
		if apiVersion == Group+"/"+v {
			return v, nil
		}
	}
	return "", fmt.Errorf("%q is not a MySQLCluster API version (%s/v1alpha1, v1beta1 or v1)", apiVersion, Group)
}

// ConversionHandler serves the CRD conversion webhook (apiextensions.k8s.io/v1 ConversionReview).
func ConversionHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(io.LimitReader(req.Body, 64<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		review := &apiextensionsv1.ConversionReview{}
		if err := json.Unmarshal(body, review); err != nil || review.Request == nil {
			http.Error(w, fmt.Sprintf("not a ConversionReview: %v", err), http.StatusBadRequest)
			return
		}
		resp := &apiextensionsv1.ConversionResponse{UID: review.Request.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
		for _, raw := range review.Request.Objects {
			in := &unstructured.Unstructured{}
			if err := in.UnmarshalJSON(raw.Raw); err != nil {
				resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}
				break
			}
			out, err := Convert(in, review.Request.DesiredAPIVersion)
			if err != nil {
				resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}
				break
			}
			data, err := out.MarshalJSON()
			if err != nil {
				resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}
				break
			}
			resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: data})
		}
		if resp.Result.Status != metav1.StatusSuccess {
			resp.ConvertedObjects = nil
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&apiextensionsv1.ConversionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview"},
			Response: resp,
		})
	})
}
