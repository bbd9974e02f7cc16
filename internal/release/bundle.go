package release

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// Annotations of an OLM registry+v1 bundle (metadata/annotations.yaml).
const (
	AnnotationMediaType      = "operators.operatorframework.io.bundle.mediatype.v1"
	AnnotationManifests      = "operators.operatorframework.io.bundle.manifests.v1"
	AnnotationPackage        = "operators.operatorframework.io.bundle.package.v1"
	AnnotationChannels       = "operators.operatorframework.io.bundle.channels.v1"
	AnnotationDefaultChannel = "operators.operatorframework.io.bundle.channel.default.v1"

	// MediaTypeRegistryV1 is the only bundle format RenderBundle understands.
	MediaTypeRegistryV1 = "registry+v1"
)

// Webhook definition types of a ClusterServiceVersion.
const (
	webhookValidating = "ValidatingAdmissionWebhook"
	webhookMutating   = "MutatingAdmissionWebhook"
	webhookConversion = "ConversionWebhook"
)

// webhookServicePort is the port OLM exposes webhook Services on.
const webhookServicePort = int64(443)

// RenderBundle converts the OLM registry+v1 bundle in dir (manifests/ and
// metadata/annotations.yaml) into plain manifests installed in namespace, doing what OLM does
// for a ClusterServiceVersion in AllNamespaces mode, without OLM:
//
//   - each spec.install.spec.deployments[] becomes an apps/v1 Deployment (its label as labels);
//   - each service account of spec.install.spec.permissions[] gets a ServiceAccount, a Role and a
//     RoleBinding, and of clusterPermissions[] a ServiceAccount, a ClusterRole and a
//     ClusterRoleBinding; Roles and ClusterRoles are named <package>-<serviceAccountName> so that
//     the names stay the same from one version of the operator to the next, and the rules of
//     several entries for one service account are merged into one role;
//   - Validating/MutatingAdmissionWebhook definitions become Validating/MutatingWebhookConfigurations
//     (named after generateName) calling the Service <deploymentName>-service on port 443 at
//     webhookPath; a ConversionWebhook sets spec.conversion on each CRD named in conversionCRDs;
//     each webhook Deployment gets that Service (selector: the Deployment's matchLabels, port 443
//     to the webhook's targetPort or containerPort);
//   - every other object in manifests/ comes along unchanged, namespaced ones put in namespace
//     when they have none.
//
// The serving certificates OLM would generate and inject (caBundle) are not produced: the
// manifests must get them some other way (for example cert-manager's CA injector).
func RenderBundle(dir, namespace string) ([]*unstructured.Unstructured, *v1alpha1.BundleInfo, error) {
	return renderBundle(dirTree(dir), namespace)
}

// RenderBundleFS is RenderBundle for the bundle at the root of fsys (fetched content, such as
// the files of a bundle image); name says where fsys comes from in messages.
func RenderBundleFS(fsys fs.FS, name, namespace string) ([]*unstructured.Unstructured, *v1alpha1.BundleInfo, error) {
	return renderBundle(fsTree(fsys, name), namespace)
}

func renderBundle(t tree, namespace string) ([]*unstructured.Unstructured, *v1alpha1.BundleInfo, error) {
	if namespace == "" {
		return nil, nil, errors.New("rendering bundle: a namespace is required")
	}
	dir := t.name(".")
	annotations, err := readBundleAnnotations(t)
	if err != nil {
		return nil, nil, err
	}
	manifestsDir := "manifests"
	if m := strings.TrimSpace(annotations[AnnotationManifests]); m != "" {
		clean := path.Clean(strings.TrimPrefix(strings.TrimSuffix(m, "/"), "/"))
		if !fs.ValidPath(clean) || clean == "." || strings.HasPrefix(m, "../") || m == ".." {
			return nil, nil, fmt.Errorf("bundle %s: annotation %s is %q, which is not a folder inside the bundle", dir, AnnotationManifests, m)
		}
		manifestsDir = clean
	}
	files, err := manifestFiles(t, manifestsDir)
	if err != nil {
		return nil, nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	all, err := decodeFiles(t, files)
	if err != nil {
		return nil, nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	var csv *unstructured.Unstructured
	var objs []*unstructured.Unstructured
	for _, o := range all {
		if o.GetKind() == "ClusterServiceVersion" && o.GroupVersionKind().Group == "operators.coreos.com" {
			if csv != nil {
				return nil, nil, fmt.Errorf("bundle %s: more than one ClusterServiceVersion (%s and %s); a registry+v1 bundle has exactly one", dir, csv.GetName(), o.GetName())
			}
			csv = o
			continue
		}
		objs = append(objs, o)
	}
	if csv == nil {
		return nil, nil, fmt.Errorf("bundle %s: no ClusterServiceVersion (kind ClusterServiceVersion, apiVersion operators.coreos.com/v1alpha1) in %s", dir, t.name(manifestsDir))
	}

	info := &v1alpha1.BundleInfo{
		Package: annotations[AnnotationPackage],
		Channel: defaultChannel(annotations),
	}
	info.OperatorVersion, _, _ = unstructured.NestedString(csv.Object, "spec", "version")
	if info.OperatorVersion == "" {
		return nil, nil, fmt.Errorf("bundle %s: ClusterServiceVersion %s has no spec.version", dir, csv.GetName())
	}
	if !semverRE.MatchString(info.OperatorVersion) {
		return nil, nil, fmt.Errorf("bundle %s: ClusterServiceVersion %s: spec.version %q is not a SemVer version", dir, csv.GetName(), info.OperatorVersion)
	}

	c := &csvConverter{
		csv:       csv,
		namespace: namespace,
		base:      roleBase(info.Package, csv.GetName(), info.OperatorVersion),
		existing:  objs,
	}
	generated, err := c.convert()
	if err != nil {
		return nil, nil, fmt.Errorf("bundle %s: ClusterServiceVersion %s: %w", dir, csv.GetName(), err)
	}
	objs = append(objs, generated...)
	defaultNamespace(objs, namespace)
	return objs, info, nil
}

// readBundleAnnotations reads metadata/annotations.yaml and checks the media type.
func readBundleAnnotations(t tree) (map[string]string, error) {
	dir := t.name(".")
	file := "metadata/annotations.yaml"
	data, err := fs.ReadFile(t.fsys, file)
	if errors.Is(err, fs.ErrNotExist) {
		if alt, altErr := fs.ReadFile(t.fsys, "metadata/annotations.yml"); altErr == nil {
			data, err = alt, nil
		}
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("bundle %s: no metadata/annotations.yaml; an OLM registry+v1 bundle has manifests/ and metadata/annotations.yaml", dir)
		}
		return nil, fmt.Errorf("bundle %s: %s: %w", dir, t.name(file), unwrapPathError(err))
	}
	var doc struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("bundle %s: %s: %w", dir, t.name(file), err)
	}
	mediaType := doc.Annotations[AnnotationMediaType]
	if mediaType != MediaTypeRegistryV1 {
		if mediaType == "" {
			return nil, fmt.Errorf("bundle %s: %s has no %s annotation; rewind reads %s bundles only", dir, t.name(file), AnnotationMediaType, MediaTypeRegistryV1)
		}
		return nil, fmt.Errorf("bundle %s: media type %q (%s) is not supported; rewind reads %s bundles only", dir, mediaType, AnnotationMediaType, MediaTypeRegistryV1)
	}
	return doc.Annotations, nil
}

// defaultChannel is the default channel annotation, else the first listed channel.
func defaultChannel(annotations map[string]string) string {
	if c := strings.TrimSpace(annotations[AnnotationDefaultChannel]); c != "" {
		return c
	}
	for _, c := range strings.Split(annotations[AnnotationChannels], ",") {
		if c = strings.TrimSpace(c); c != "" {
			return c
		}
	}
	return ""
}

// roleBase is the prefix of generated role names: the package name, or else the CSV name
// without its conventional ".v<version>" suffix, so names do not change between versions.
func roleBase(pkg, csvName, version string) string {
	if pkg != "" {
		return pkg
	}
	v := strings.TrimPrefix(version, "v")
	for _, suffix := range []string{".v" + v, "." + v, "-v" + v} {
		if trimmed := strings.TrimSuffix(csvName, suffix); trimmed != csvName && trimmed != "" {
			return trimmed
		}
	}
	return csvName
}

var semverRE = regexp.MustCompile(v1alpha1.SemVerPattern)

// csvConverter turns one ClusterServiceVersion into plain objects.
type csvConverter struct {
	csv       *unstructured.Unstructured
	namespace string
	// base prefixes the names of generated Roles and ClusterRoles.
	base string
	// existing are the other objects of the bundle (CRDs are edited in place for conversion).
	existing []*unstructured.Unstructured

	deployments map[string]map[string]interface{}
	out         []*unstructured.Unstructured
}

func (c *csvConverter) convert() ([]*unstructured.Unstructured, error) {
	strategy, _, _ := unstructured.NestedString(c.csv.Object, "spec", "install", "strategy")
	if strategy != "deployment" {
		return nil, fmt.Errorf("spec.install.strategy is %q; only the deployment strategy exists", strategy)
	}
	if err := c.convertDeployments(); err != nil {
		return nil, err
	}
	if err := c.convertPermissions(); err != nil {
		return nil, err
	}
	if err := c.convertWebhooks(); err != nil {
		return nil, err
	}
	return c.out, nil
}

func (c *csvConverter) emit(obj map[string]interface{}) {
	// A deep copy, so generated objects share no maps with the CSV or with each other.
	c.out = append(c.out, &unstructured.Unstructured{Object: runtime.DeepCopyJSON(obj)})
}

func (c *csvConverter) convertDeployments() error {
	deployments, err := nestedMaps(c.csv.Object, "spec", "install", "spec", "deployments")
	if err != nil {
		return err
	}
	if len(deployments) == 0 {
		return errors.New("spec.install.spec.deployments is empty; the operator needs at least one Deployment")
	}
	c.deployments = map[string]map[string]interface{}{}
	for i, d := range deployments {
		name, _ := d["name"].(string)
		if name == "" {
			return fmt.Errorf("spec.install.spec.deployments[%d] has no name", i)
		}
		if _, dup := c.deployments[name]; dup {
			return fmt.Errorf("spec.install.spec.deployments names %s twice", name)
		}
		spec, ok := d["spec"].(map[string]interface{})
		if !ok {
			return fmt.Errorf("spec.install.spec.deployments[%d] (%s) has no spec", i, name)
		}
		metadata := map[string]interface{}{"name": name, "namespace": c.namespace}
		if label, ok := d["label"].(map[string]interface{}); ok && len(label) > 0 {
			metadata["labels"] = label
		}
		c.deployments[name] = spec
		c.emit(map[string]interface{}{
			"apiVersion": "apps/v1",
			"kind":       "Deployment",
			"metadata":   metadata,
			"spec":       spec,
		})
	}
	return nil
}

// convertPermissions emits the ServiceAccounts, Roles, RoleBindings, ClusterRoles and
// ClusterRoleBindings of spec.install.spec.permissions and clusterPermissions.
func (c *csvConverter) convertPermissions() error {
	emittedSA := map[string]bool{}
	for _, o := range c.existing {
		if o.GetKind() == "ServiceAccount" && o.GetAPIVersion() == "v1" && (o.GetNamespace() == "" || o.GetNamespace() == c.namespace) {
			emittedSA[o.GetName()] = true
		}
	}
	for _, field := range []string{"permissions", "clusterPermissions"} {
		entries, err := nestedMaps(c.csv.Object, "spec", "install", "spec", field)
		if err != nil {
			return err
		}
		var order []string
		rules := map[string][]interface{}{}
		for i, e := range entries {
			sa, _ := e["serviceAccountName"].(string)
			if sa == "" {
				return fmt.Errorf("spec.install.spec.%s[%d] has no serviceAccountName", field, i)
			}
			r, _ := e["rules"].([]interface{})
			if _, seen := rules[sa]; !seen {
				order = append(order, sa)
				rules[sa] = []interface{}{}
			}
			rules[sa] = append(rules[sa], r...)
		}
		for _, sa := range order {
			if !emittedSA[sa] {
				emittedSA[sa] = true
				c.emit(map[string]interface{}{
					"apiVersion": "v1",
					"kind":       "ServiceAccount",
					"metadata":   map[string]interface{}{"name": sa, "namespace": c.namespace},
				})
			}
			name := c.base + "-" + sa
			roleKind, bindingKind := "Role", "RoleBinding"
			roleMeta := map[string]interface{}{"name": name, "namespace": c.namespace}
			bindingMeta := map[string]interface{}{"name": name, "namespace": c.namespace}
			if field == "clusterPermissions" {
				roleKind, bindingKind = "ClusterRole", "ClusterRoleBinding"
				roleMeta = map[string]interface{}{"name": name}
				bindingMeta = map[string]interface{}{"name": name}
			}
			c.emit(map[string]interface{}{
				"apiVersion": "rbac.authorization.k8s.io/v1",
				"kind":       roleKind,
				"metadata":   roleMeta,
				"rules":      rules[sa],
			})
			c.emit(map[string]interface{}{
				"apiVersion": "rbac.authorization.k8s.io/v1",
				"kind":       bindingKind,
				"metadata":   bindingMeta,
				"roleRef": map[string]interface{}{
					"apiGroup": "rbac.authorization.k8s.io",
					"kind":     roleKind,
					"name":     name,
				},
				"subjects": []interface{}{map[string]interface{}{
					"kind":      "ServiceAccount",
					"name":      sa,
					"namespace": c.namespace,
				}},
			})
		}
	}
	return nil
}

// convertWebhooks emits the webhook configurations and Services of spec.webhookdefinitions and
// wires conversion webhooks into their CRDs.
func (c *csvConverter) convertWebhooks() error {
	defs, err := nestedMaps(c.csv.Object, "spec", "webhookdefinitions")
	if err != nil {
		return err
	}
	owned := map[string]bool{}
	ownedCRDs, err := nestedMaps(c.csv.Object, "spec", "customresourcedefinitions", "owned")
	if err != nil {
		return err
	}
	for _, o := range ownedCRDs {
		if name, _ := o["name"].(string); name != "" {
			owned[name] = true
		}
	}
	// targetPorts maps each webhook Deployment to the port its Service forwards 443 to; the
	// Services are emitted in the order the deployments first appear.
	targetPorts := map[string]interface{}{}
	var serviceOrder []string
	for i, d := range defs {
		where := fmt.Sprintf("spec.webhookdefinitions[%d]", i)
		typ, _ := d["type"].(string)
		deployment, _ := d["deploymentName"].(string)
		if deployment == "" {
			return fmt.Errorf("%s has no deploymentName", where)
		}
		if _, ok := c.deployments[deployment]; !ok {
			return fmt.Errorf("%s: deploymentName %s is not one of spec.install.spec.deployments", where, deployment)
		}
		containerPort, ok := d["containerPort"].(int64)
		if !ok || containerPort == 0 {
			containerPort = webhookServicePort
		}
		var target interface{} = containerPort
		if t, ok := d["targetPort"]; ok && t != nil && t != "" && t != int64(0) {
			target = t
		}
		if prev, ok := targetPorts[deployment]; ok {
			if fmt.Sprint(prev) != fmt.Sprint(target) {
				return fmt.Errorf("%s: the webhooks of deployment %s use different ports (%v and %v); they share one Service %s-service", where, deployment, prev, target, deployment)
			}
		} else {
			targetPorts[deployment] = target
			serviceOrder = append(serviceOrder, deployment)
		}
		path, _ := d["webhookPath"].(string)
		if path == "" {
			path = "/"
		}
		service := map[string]interface{}{
			"namespace": c.namespace,
			"name":      deployment + "-service",
			"path":      path,
			"port":      webhookServicePort,
		}
		reviewVersions, _ := d["admissionReviewVersions"].([]interface{})

		switch typ {
		case webhookValidating, webhookMutating:
			if err := c.admissionWebhook(where, typ, d, service); err != nil {
				return err
			}
		case webhookConversion:
			crds, _ := d["conversionCRDs"].([]interface{})
			if len(crds) == 0 {
				return fmt.Errorf("%s: a ConversionWebhook needs conversionCRDs", where)
			}
			if len(reviewVersions) == 0 {
				reviewVersions = []interface{}{"v1"}
			}
			for _, n := range crds {
				name, _ := n.(string)
				if !owned[name] {
					return fmt.Errorf("%s: conversionCRDs names %q, which is not in spec.customresourcedefinitions.owned", where, name)
				}
				if err := c.setConversion(where, name, service, reviewVersions); err != nil {
					return err
				}
			}
		default:
			return fmt.Errorf("%s: type %q is not one of %s, %s, %s", where, typ, webhookValidating, webhookMutating, webhookConversion)
		}
	}
	for _, deployment := range serviceOrder {
		if err := c.webhookService(deployment, targetPorts[deployment]); err != nil {
			return err
		}
	}
	return nil
}

// admissionWebhook emits the Validating/MutatingWebhookConfiguration of one definition.
func (c *csvConverter) admissionWebhook(where, typ string, d, service map[string]interface{}) error {
	name, _ := d["generateName"].(string)
	if name == "" {
		return fmt.Errorf("%s: a %s needs generateName", where, typ)
	}
	webhook := map[string]interface{}{
		"name":         name,
		"clientConfig": map[string]interface{}{"service": service},
	}
	fields := []string{"rules", "admissionReviewVersions", "sideEffects", "failurePolicy", "matchPolicy", "objectSelector", "timeoutSeconds"}
	kind := "ValidatingWebhookConfiguration"
	if typ == webhookMutating {
		kind = "MutatingWebhookConfiguration"
		fields = append(fields, "reinvocationPolicy")
	}
	for _, f := range fields {
		if v, ok := d[f]; ok && v != nil {
			webhook[f] = v
		}
	}
	if _, ok := webhook["admissionReviewVersions"]; !ok {
		webhook["admissionReviewVersions"] = []interface{}{"v1"}
	}
	if _, ok := webhook["sideEffects"]; !ok {
		webhook["sideEffects"] = "None"
	}
	c.emit(map[string]interface{}{
		"apiVersion": "admissionregistration.k8s.io/v1",
		"kind":       kind,
		"metadata":   map[string]interface{}{"name": name},
		"webhooks":   []interface{}{webhook},
	})
	return nil
}

// setConversion points the conversion of CRD name at the webhook service.
func (c *csvConverter) setConversion(where, name string, service map[string]interface{}, reviewVersions []interface{}) error {
	for _, o := range c.existing {
		if !isCRD(o) || o.GetName() != name {
			continue
		}
		if o.GetAPIVersion() != "apiextensions.k8s.io/v1" {
			return fmt.Errorf("%s: CRD %s is %s; conversion webhooks need apiextensions.k8s.io/v1", where, name, o.GetAPIVersion())
		}
		conversion := map[string]interface{}{
			"strategy": "Webhook",
			"webhook": map[string]interface{}{
				"clientConfig":             map[string]interface{}{"service": copyMap(service)},
				"conversionReviewVersions": append([]interface{}{}, reviewVersions...),
			},
		}
		return unstructured.SetNestedField(o.Object, conversion, "spec", "conversion")
	}
	return fmt.Errorf("%s: conversionCRDs names %s, but the bundle's manifests have no such CustomResourceDefinition", where, name)
}

// webhookService emits the Service <deployment>-service in front of a webhook Deployment.
func (c *csvConverter) webhookService(deployment string, target interface{}) error {
	name := deployment + "-service"
	for _, o := range c.existing {
		if o.GetKind() == "Service" && o.GetAPIVersion() == "v1" && o.GetName() == name && (o.GetNamespace() == "" || o.GetNamespace() == c.namespace) {
			return fmt.Errorf("the bundle's manifests already have a Service %s, the name of the webhook Service generated for deployment %s", name, deployment)
		}
	}
	selector, _, _ := unstructured.NestedStringMap(c.deployments[deployment], "selector", "matchLabels")
	if len(selector) == 0 {
		return fmt.Errorf("deployment %s serves webhooks but has no spec.selector.matchLabels to select its pods with", deployment)
	}
	sel := map[string]interface{}{}
	for k, v := range selector {
		sel[k] = v
	}
	c.emit(map[string]interface{}{
		"apiVersion": "v1",
		"kind":       "Service",
		"metadata":   map[string]interface{}{"name": name, "namespace": c.namespace},
		"spec": map[string]interface{}{
			"selector": sel,
			"ports": []interface{}{map[string]interface{}{
				"name":       "https",
				"port":       webhookServicePort,
				"protocol":   "TCP",
				"targetPort": target,
			}},
		},
	})
	return nil
}

// nestedMaps returns the list at fields of obj as maps; a missing list is empty.
func nestedMaps(obj map[string]interface{}, fields ...string) ([]map[string]interface{}, error) {
	raw, found, err := unstructured.NestedFieldNoCopy(obj, fields...)
	if err != nil || !found || raw == nil {
		return nil, err
	}
	list, ok := raw.([]interface{})
	if !ok {
		return nil, fmt.Errorf("%s is not a list", strings.Join(fields, "."))
	}
	out := make([]map[string]interface{}, 0, len(list))
	for i, item := range list {
		m, ok := item.(map[string]interface{})
		if !ok {
			return nil, fmt.Errorf("%s[%d] is not an object", strings.Join(fields, "."), i)
		}
		out = append(out, m)
	}
	return out, nil
}

func copyMap(m map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
