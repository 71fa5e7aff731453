// A minimal DRA kubelet plugin for the kind cluster (issue 23: sigs.k8s.io/dra-example-driver
// is not served by the module proxy here).  On its node it publishes the GPUs Slurm's
// gres.conf declares there (their count: the node's label kind.slurmbridge.io/gpus) as
// devices gpu-0..gpu-N-1 of driver gpu.example.com, attribute "index" = Slurm's GRES index,
// and hands a container the devices of its claims through CDI (env GPU_DEVICE_<i>=gpu-<i>).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

const (
	driverName = "gpu.example.com"
	cdiKind    = "example.com/gpu"
	gpusLabel  = "kind.slurmbridge.io/gpus"
)

type driver struct{}

func (driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		var devices []kubeletplugin.Device
		if claim.Status.Allocation != nil {
			for _, r := range claim.Status.Allocation.Devices.Results {
				if r.Driver != driverName {
					continue
				}
				devices = append(devices, kubeletplugin.Device{
					Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
					CDIDeviceIDs: []string{cdiKind + "=" + r.Device},
				})
			}
		}
		out[claim.UID] = kubeletplugin.PrepareResult{Devices: devices}
	}
	return out, nil
}

func (driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		out[claim.UID] = nil // nothing was set up per claim: the CDI spec is static
	}
	return out, nil
}

func (driver) HandleError(ctx context.Context, err error, msg string) {
	runtime.HandleErrorWithContext(ctx, err, msg)
}

// writeCDISpec describes every device once; a claim's container gets the edits of its own.
func writeCDISpec(dir string, count int) error {
	devices := make([]map[string]any, count)
	for i := range count {
		name := fmt.Sprintf("gpu-%d", i)
		devices[i] = map[string]any{"name": name, "containerEdits": map[string]any{
			"env": []string{fmt.Sprintf("GPU_DEVICE_%d=%s", i, name)}}}
	}
	spec, err := json.Marshal(map[string]any{"cdiVersion": "0.6.0", "kind": cdiKind, "devices": devices})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(dir, ".example.com-gpu.json.tmp")
	if err := os.WriteFile(tmp, spec, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "example.com-gpu.json"))
}

func run() error {
	node := os.Getenv("NODE_NAME")
	if node == "" {
		return fmt.Errorf("set NODE_NAME (the downward API's spec.nodeName)")
	}
	config, err := rest.InClusterConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	self, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	count, err := strconv.Atoi(self.Labels[gpusLabel])
	if err != nil || count < 0 {
		return fmt.Errorf("node %s: label %s=%q is not a GPU count (deploy/kind/up.sh sets it)", node, gpusLabel, self.Labels[gpusLabel])
	}
	if err := writeCDISpec("/var/run/cdi", count); err != nil {
		return fmt.Errorf("writing the CDI spec: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(kubeletplugin.KubeletPluginsDir, driverName), 0o750); err != nil {
		return err
	}
	helper, err := kubeletplugin.Start(ctx, driver{}, kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(node), kubeletplugin.DriverName(driverName))
	if err != nil {
		return fmt.Errorf("starting the kubelet plugin: %w", err)
	}
	defer helper.Stop()
	devices := make([]resourceapi.Device, count)
	for i := range count {
		index := int64(i)
		devices[i] = resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"index": {IntValue: &index}}}
	}
	pools := map[string]resourceslice.Pool{node: {Slices: []resourceslice.Slice{{Devices: devices}}}}
	if err := helper.PublishResources(ctx, resourceslice.DriverResources{Pools: pools}); err != nil {
		return fmt.Errorf("publishing the ResourceSlice: %w", err)
	}
	klog.InfoS("serving", "driver", driverName, "node", node, "devices", count)
	<-ctx.Done()
	return nil
}

func main() {
	if err := run(); err != nil {
		klog.ErrorS(err, "dra-gpu-plugin")
		os.Exit(1)
	}
}
