-- Argo CD health check for rewind.dev/v1alpha1 Rollout. Install it under
-- resource.customizations.health.rewind.dev_Rollout in argocd-cm (see README, "Using rewind
-- with Flux or Argo CD"). A Rollout is Healthy once spec.release runs on every cluster;
-- Degraded when it stopped for a person (Stalled: a failed rollout, or a release that failed
-- and was rolled back, which rewind holds until spec.release changes or `rewind retry`);
-- Suspended when paused or waiting for a wave's approval; Progressing otherwise.
local hs = {status = "Progressing", message = "Waiting for the rollout to be observed"}
if obj.status == nil then
  return hs
end
if obj.metadata.generation ~= nil and obj.status.observedGeneration ~= obj.metadata.generation then
  hs.message = "Waiting for the controller to observe generation " .. tostring(obj.metadata.generation)
  return hs
end
local conditions = {}
if obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    conditions[c.type] = c
  end
end
local phase = obj.status.phase or ""
if conditions["Stalled"] ~= nil and conditions["Stalled"].status == "True" then
  hs.status = "Degraded"
  hs.message = conditions["Stalled"].reason .. ": " .. (conditions["Stalled"].message or "")
  return hs
end
if phase == "Paused" or phase == "WaitingForApproval" then
  hs.status = "Suspended"
  if conditions["Progressing"] ~= nil then
    hs.message = conditions["Progressing"].message
  end
  return hs
end
if conditions["Ready"] ~= nil and conditions["Ready"].status == "True" then
  hs.status = "Healthy"
  hs.message = conditions["Ready"].message
  return hs
end
if conditions["Ready"] ~= nil then
  hs.message = conditions["Ready"].message
end
return hs
