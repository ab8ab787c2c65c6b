"""Inventory validation: what a form or the admin must refuse, with a reason."""

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError

from inventory.models import Deployment, Gpu, ServedModel
from tests.factories import (
    DeploymentFactory,
    GpuFactory,
    HostFactory,
    MigSliceFactory,
    ServedModelFactory,
)

pytestmark = pytest.mark.django_db


def test_kv_bytes_per_token_follows_the_models_shape():
    llama_8b = ServedModelFactory.build(
        num_layers=32, num_kv_heads=8, head_dim=128, kv_dtype="bf16"
    )
    assert llama_8b.effective_kv_bytes_per_token == 2 * 32 * 8 * 128 * 2  # 128 KiB
    fp8 = ServedModelFactory.build(num_layers=32, num_kv_heads=8, head_dim=128, kv_dtype="fp8_e4m3")
    assert fp8.effective_kv_bytes_per_token == 65536


def test_mla_has_no_factor_two():
    deepseek = ServedModel(
        name="deepseek-v3",
        weights_bytes=1,
        num_layers=61,
        uses_mla=True,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        kv_dtype="bf16",
    )
    deepseek.full_clean()
    assert deepseek.effective_kv_bytes_per_token == 61 * (512 + 64) * 2


def test_an_explicit_kv_figure_wins_over_the_shape():
    model = ServedModelFactory.build(kv_bytes_per_token=1000)
    assert model.effective_kv_bytes_per_token == 1000


def test_a_model_needs_its_kv_size_or_its_whole_shape():
    partial = ServedModel(name="m", weights_bytes=1, num_layers=32, kv_dtype="bf16")
    with pytest.raises(ValidationError, match="or none of them"):
        partial.full_clean()
    nothing = ServedModel(name="n", weights_bytes=1)
    with pytest.raises(ValidationError) as error:
        nothing.full_clean()
    assert "kv_bytes_per_token" in error.value.message_dict


def test_mig_slices_may_not_overlap():
    first = MigSliceFactory(start_slot=0, size_slots=4, profile_name="3g.71gb")
    overlapping = MigSliceFactory.build(gpu=first.gpu, start_slot=2, size_slots=2)
    with pytest.raises(ValidationError, match=r"overlap 3g\.71gb on slots 0-3"):
        overlapping.full_clean()
    beside = MigSliceFactory.build(
        gpu=first.gpu, start_slot=4, size_slots=2, profile_name="2g.35gb"
    )
    beside.full_clean()


def test_a_mig_slice_needs_mig_enabled():
    gpu = GpuFactory(mig_mode=Gpu.MigMode.DISABLED)
    with pytest.raises(ValidationError, match="MIG is not enabled"):
        MigSliceFactory.build(gpu=gpu).full_clean()


def test_thread_percentage_only_for_mps():
    deployment = DeploymentFactory.build(
        isolation_mode=Deployment.Isolation.GPU_GROUP, mps_active_thread_percentage=40
    )
    with pytest.raises(ValidationError) as error:
        deployment.full_clean(exclude=["served_model", "host"])
    assert "mps_active_thread_percentage" in error.value.message_dict


def test_the_database_refuses_a_thread_percentage_outside_mps():
    with pytest.raises(IntegrityError):
        DeploymentFactory(
            isolation_mode=Deployment.Isolation.GPU_GROUP, mps_active_thread_percentage=40
        )


def test_a_mig_deployment_sits_on_a_slice_of_its_own_host():
    mig_slice = MigSliceFactory()
    other_host = HostFactory()
    deployment = DeploymentFactory.build(
        host=other_host, isolation_mode=Deployment.Isolation.MIG, mig_slice=mig_slice
    )
    with pytest.raises(ValidationError, match="is not on"):
        deployment.clean()
    DeploymentFactory.build(
        host=mig_slice.gpu.host, isolation_mode=Deployment.Isolation.MIG, mig_slice=mig_slice
    ).clean()


def test_cards_must_belong_to_the_deployments_host():
    here, there = GpuFactory(), GpuFactory()
    with pytest.raises(ValidationError, match=f"Not on {here.host.name}"):
        Deployment.validate_cards(here.host, Deployment.Isolation.GPU_GROUP, [here, there])
    Deployment.validate_cards(here.host, Deployment.Isolation.GPU_GROUP, [here])
    with pytest.raises(ValidationError, match="Pick the cards"):
        Deployment.validate_cards(here.host, Deployment.Isolation.MPS, [])


def test_host_labels_must_be_text_pairs():
    host = HostFactory.build(labels={"rack": 12})
    with pytest.raises(ValidationError) as error:
        host.full_clean()
    assert "labels" in error.value.message_dict
    host = HostFactory.build(name="bad name!")
    with pytest.raises(ValidationError) as error:
        host.full_clean()
    assert "name" in error.value.message_dict


def test_a_hosts_isolation_modes_ignore_stopped_deployments():
    gpu = GpuFactory()
    DeploymentFactory(host=gpu.host, gpus=[gpu], isolation_mode=Deployment.Isolation.GPU_GROUP)
    DeploymentFactory(
        host=gpu.host,
        gpus=[gpu],
        isolation_mode=Deployment.Isolation.TIME_SLICING,
        status=Deployment.Status.STOPPED,
    )
    assert gpu.host.isolation_modes() == {"gpu_group"}
