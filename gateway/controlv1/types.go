package controlv1

// Type URLs of the resources of a snapshot (ref/gateway-control-v1.md), in
// the order of ConfigSnapshot's fields.
const (
	typePrefix         = "type.googleapis.com/gateway.control.v1."
	ListenerType       = typePrefix + "Listener"       // named NAME/PORT
	HttpRouteType      = typePrefix + "HttpRoute"      // named NAMESPACE/NAME
	GrpcRouteType      = typePrefix + "GrpcRoute"      // named NAMESPACE/NAME
	StreamRouteType    = typePrefix + "StreamRoute"    // named NAMESPACE/NAME
	BackendClusterType = typePrefix + "BackendCluster" // named NAME
	// SecretMaterialType carries private keys (cert_pem, key_pem).
	SecretMaterialType = typePrefix + "SecretMaterial" // named NAME
	// ConfigSnapshotType and StatusReportType name the snapshot and the
	// status report (for authorization and /debug/clients).
	ConfigSnapshotType = typePrefix + "ConfigSnapshot"
	StatusReportType   = typePrefix + "StatusReport"
)

// ResourceTypes are the type URLs of a snapshot's resources, in the order of
// its fields.
var ResourceTypes = []string{ListenerType, HttpRouteType, GrpcRouteType, StreamRouteType, BackendClusterType, SecretMaterialType}
