"""factory_boy factories for the console's models."""

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from inventory.models import Deployment, Gpu, Host, MigSlice, ServedModel
from runbooks.models import RunbookNote

GIB = 1024**3
MIB = 1024**2


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("correct horse battery staple")

    @factory.post_generation
    def roles(self, create, extracted, **kwargs):
        for role in extracted or ():
            self.groups.add(Group.objects.get(name=role))


class HostFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Host

    name = factory.Sequence(lambda n: f"gpu-host-{n:02d}")
    address = factory.LazyAttribute(lambda host: f"{host.name}.example.internal")
    collector = Host.Collector.SIMULATED


class GpuFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Gpu

    host = factory.SubFactory(HostFactory)
    index = factory.Sequence(lambda n: n % 8)
    uuid = factory.Sequence(lambda n: f"GPU-00000000-0000-0000-0000-{n:012d}")
    # As a real H100 80GB HBM3 reports it (shared/fixtures/nvidia-smi).
    product_name = "NVIDIA H100 80GB HBM3"
    memory_total_bytes = 81559 * MIB


class MigSliceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = MigSlice

    gpu = factory.SubFactory(
        GpuFactory,
        product_name="NVIDIA H200",
        memory_total_bytes=143771 * MIB,
        mig_mode=Gpu.MigMode.ENABLED,
    )
    profile_name = "3g.71gb"
    start_slot = 0
    size_slots = 4
    memory_bytes = 71424 * MIB


class ServedModelFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ServedModel
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"model-{n}")
    engine = ServedModel.Engine.VLLM
    weights_bytes = 16 * GIB
    # Llama-3-8B: 32 layers, 8 KV heads, head dim 128.
    num_layers = 32
    num_kv_heads = 8
    head_dim = 128
    kv_dtype = "bf16"
    max_context_tokens = 8192
    priority = 2
    p99_latency_slo_ms = 800


class DeploymentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Deployment
        skip_postgeneration_save = True

    served_model = factory.SubFactory(ServedModelFactory)
    host = factory.SubFactory(HostFactory)
    isolation_mode = Deployment.Isolation.GPU_GROUP
    kv_reservation_bytes = 8 * GIB
    kv_reservation_basis = Deployment.KvBasis.P95
    admission_policy = Deployment.Admission.QUEUE

    @factory.post_generation
    def gpus(self, create, extracted, **kwargs):
        if extracted:
            self.gpus.set(extracted)


class RunbookNoteFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = RunbookNote

    slug = factory.Sequence(lambda n: f"note-{n}")
    title = factory.Sequence(lambda n: f"Note {n}")
    body = "Restart the engine **after** draining it."
    scope = RunbookNote.Scope.TOPIC
